"""The Telegram fake, driven by the real python-telegram-bot."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import (
    Bot,
    File,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    Message,
    ReplyParameters,
    Update,
)
from telegram.error import (
    BadRequest,
    Conflict,
    EndPointNotFound,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TimedOut,
)
from telegram.ext import (
    Application,
    ApplicationBuilder,
    BaseHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.model.images import bytes_reader, dimensions, image_type
from tests.fakes.audio import tone_ogg_opus
from tests.fakes.images import jpeg, png
from tests.fakes.server import LoopbackServer
from tests.fakes.telegram_fake import (
    CLIENT_CLOSED,
    DROPPED,
    JSON,
    MAX_DOWNLOAD_BYTES,
    FakeTelegram,
    auto_entities,
    free_port,
    parse_html,
    utf16_len,
)

pytestmark = pytest.mark.timeout(20)

Context = ContextTypes.DEFAULT_TYPE
GROUP = -1001234


@contextlib.asynccontextmanager
async def polling(fake: FakeTelegram, *handlers: BaseHandler[Any, Any, Any]) -> AsyncIterator[Any]:
    """A real Application polling the fake, as the daemon runs it."""
    app: Application[Any, Any, Any, Any, Any, Any] = (
        ApplicationBuilder()
        .token(fake.token)
        .base_url(fake.base_url)
        .base_file_url(fake.base_file_url)
        .build()
    )
    for handler in handlers:
        app.add_handler(handler)
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0, timeout=dtm.timedelta(seconds=1))
        try:
            yield app
        finally:
            await app.updater.stop()
            await app.stop()


# -- end to end through an Application ------------------------------------------
async def test_handler_gets_message_and_reply_is_recorded(fake: FakeTelegram) -> None:
    seen: list[Update] = []
    replies: list[Message] = []

    async def echo(update: Update, context: Context) -> None:
        seen.append(update)
        assert update.message is not None and update.message.text is not None
        replies.append(await context.bot.send_message(42, "pong: " + update.message.text))

    async with polling(fake, MessageHandler(filters.TEXT, echo)):
        mid = fake.push_message(42, "ping", user_id=7, username="ann")
        sent = await fake.wait_sent(1)

    assert sent == [{"chat_id": "42", "text": "pong: ping"}]  # PTB sends scalars as strings
    msg = seen[0].message
    assert msg is not None and msg.message_id == mid == 1 and msg.chat.type == "private"
    assert msg.from_user is not None and (msg.from_user.id, msg.from_user.username) == (7, "ann")
    reply = replies[0]
    assert reply.message_id == 2 and reply.text == "pong: ping"  # ids count per chat
    assert reply.from_user is not None and reply.from_user.id == fake.bot_id
    assert [c.method for c in fake.calls[:2]] == ["getMe", "deleteWebhook"]
    assert fake.calls_of("getUpdates")[0].params == {"timeout": "1", "offset": "0"}
    assert fake.pending_updates == []  # confirmed by the next offset


async def test_topic_reply_quotes_and_keeps_thread(fake: FakeTelegram) -> None:
    mentions: list[str] = []

    async def answer(update: Update, context: Context) -> None:
        assert update.message is not None
        mentions.extend(update.message.parse_entities(["mention"]).values())
        await update.message.reply_text("hi")

    async with polling(fake, MessageHandler(filters.TEXT, answer)):
        mid = fake.push_message(
            GROUP,
            "😀 @soul_test_bot hello",
            user_id=7,
            chat_type="supergroup",
            message_thread_id=5,
            is_topic_message=True,
        )
        sent = await fake.wait_sent(1)

    assert mentions == ["@soul_test_bot"]  # offsets are in UTF-16 units
    # reply_text in a group quotes the message and, in a topic, stays in the thread.
    assert sent[0]["message_thread_id"] == "5"
    assert sent[0]["reply_parameters"] == {"message_id": mid}
    assert fake.calls_of("sendMessage")[0].result["is_topic_message"] is True


async def test_group_command_needs_our_username(fake: FakeTelegram) -> None:
    async def start(update: Update, context: Context) -> None:
        assert update.effective_chat is not None
        await context.bot.send_message(update.effective_chat.id, f"args={context.args}")

    async with polling(fake, CommandHandler("start", start)):
        fake.push_message(GROUP, "/start@other_bot x", user_id=7, chat_type="group")
        fake.push_message(GROUP, "/start@soul_test_bot now", user_id=7, chat_type="group")
        sent = await fake.wait_sent(1)

    assert [s["text"] for s in sent] == ["args=['now']"]


async def test_reply_to_bot_extra_payload_and_raw_update(fake: FakeTelegram) -> None:
    got: list[Message] = []

    async def keep(update: Update, context: Context) -> None:
        assert update.effective_message is not None
        got.append(update.effective_message)

    handlers = (
        MessageHandler(filters.PHOTO, keep),
        MessageHandler(filters.UpdateType.EDITED_MESSAGE, keep),
    )
    async with polling(fake, *handlers):
        photo = {"file_id": "F1", "file_unique_id": "U1", "width": 9, "height": 9}
        fake.push_message(
            42, None, user_id=7, reply_to_bot=True, extra={"photo": [photo], "caption": "look"}
        )
        chat = {"id": 42, "type": "private", "first_name": "Ann"}
        edited = {
            "message_id": 77,
            "date": 1,
            "edit_date": 2,
            "chat": chat,
            "from": {"id": 7, "is_bot": False, "first_name": "Ann"},
            "text": "fixed",
        }
        uid = fake.push_update({"edited_message": edited})
        await fake.wait_for(lambda f: len(got) == 2, what="both messages handled")

    photo_msg, edited_msg = got
    assert photo_msg.caption == "look" and photo_msg.photo[0].file_id == "F1"
    replied = photo_msg.reply_to_message
    assert replied is not None and replied.from_user is not None
    assert replied.from_user.id == fake.bot_id and replied.message_id < photo_msg.message_id
    assert edited_msg.text == "fixed" and uid == 10002


async def test_a_handler_downloads_the_photo_a_user_sent(fake: FakeTelegram) -> None:
    got: list[bytes] = []

    async def fetch(update: Update, context: Context) -> None:
        assert update.message is not None
        file = await update.message.photo[-1].get_file()  # the largest size
        got.append(bytes(await file.download_as_bytearray()))

    async with polling(fake, MessageHandler(filters.PHOTO, fetch)):
        fake.push_message(42, None, user_id=7, extra=fake.photo_extra(b"\x89PNG full"))
        await fake.wait_for(lambda f: len(got) == 1, what="the photo downloaded")

    assert got == [b"\x89PNG full"]
    assert [(d.file_path, d.status) for d in fake.downloads] == [("files/file_3", 200)]


async def test_a_photo_of_a_given_size_is_a_jpeg_of_that_size_in_every_size(
    fake: FakeTelegram,
) -> None:
    got: list[tuple[int, int, bytes]] = []

    async def fetch(update: Update, context: Context) -> None:
        assert update.message is not None
        for size in update.message.photo:
            file = await size.get_file()
            got.append((size.width, size.height, bytes(await file.download_as_bytearray())))

    async with polling(fake, MessageHandler(filters.PHOTO, fetch)):
        fake.push_message(42, None, user_id=7, extra=fake.photo_extra(width=4032, height=3024))
        await fake.wait_for(lambda f: len(got) == 3, what="every size downloaded")

    assert [(w, h) for w, h, _ in got] == [(90, 67), (320, 240), (4032, 3024)]
    for width, height, data in got:
        read = bytes_reader(data)
        assert image_type(read) == "image/jpeg"
        assert dimensions(read, "image/jpeg") == (width, height)


async def test_a_voice_note_and_an_audio_file_come_with_their_fields_and_download(
    fake: FakeTelegram,
) -> None:
    got: list[tuple[JSON, bytes]] = []

    async def fetch(update: Update, context: Context) -> None:
        message = update.message
        assert message is not None
        file = message.voice or message.audio
        assert file is not None
        data = bytes(await (await file.get_file()).download_as_bytearray())
        got.append((file.to_dict(), data))

    note, song = tone_ogg_opus(2.0), tone_ogg_opus(1.0, 330.0)
    handler = MessageHandler(filters.VOICE | filters.AUDIO, fetch)
    async with polling(fake, handler):
        fake.push_message(42, None, user_id=7, extra=fake.voice_extra(note))
        song_fields = fake.audio_extra(song, file_name="sea.ogg", duration=9)
        fake.push_message(42, None, user_id=7, extra=song_fields)
        await fake.wait_for(lambda f: len(got) == 2, what="both downloaded")

    (voice, voice_data), (audio, audio_data) = got
    assert voice == {"file_id": "FILE000001", "file_unique_id": "UFILE000001",
                     "file_size": len(note), "duration": 2, "mime_type": "audio/ogg"}  # fmt: skip
    assert audio["file_name"] == "sea.ogg" and audio["duration"] == 9
    assert (voice_data, audio_data) == (note, song)
    assert [d.status for d in fake.downloads] == [200, 200]


def test_the_image_files_are_the_size_asked_for() -> None:
    assert len(jpeg(4032, 3024, 2_000_000)) == 2_000_000
    assert len(png(640, 480, 100_000)) == 100_000
    assert dimensions(bytes_reader(png(640, 480)), "image/png") == (640, 480)
    assert jpeg(10, 10).endswith(b"\xff\xd9") and png(1, 1).endswith(b"IEND\xaeB`\x82")


async def test_stopping_the_updater_does_not_hang(fake: FakeTelegram) -> None:
    app = ApplicationBuilder().token(fake.token).base_url(fake.base_url).build()
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(timeout=dtm.timedelta(seconds=30))
        await fake.wait_for(lambda f: f.waiting_polls == 1)
        await asyncio.wait_for(app.updater.stop(), 2)
        await app.stop()
    polls = fake.calls_of("getUpdates")
    assert polls[-2].status == 499 and polls[-2].params["timeout"] == "30"  # PTB hung up
    assert polls[-1].status == 200 and polls[-1].params["timeout"] == "0"  # the last one


# -- long polling with a bare Bot ------------------------------------------------
async def test_offset_confirms_updates(fake: FakeTelegram, bot: Bot) -> None:
    fake.push_message(42, "a", user_id=7)
    fake.push_message(42, "b", user_id=7)
    first = await bot.get_updates(timeout=0)
    again = await bot.get_updates(timeout=0)
    assert [u.update_id for u in first] == [u.update_id for u in again]  # not yet confirmed
    assert [u.message.text for u in first if u.message] == ["a", "b"]
    assert len(await bot.get_updates(timeout=0, limit=1)) == 1
    after = await bot.get_updates(offset=first[0].update_id + 1, timeout=0)
    assert [u.message.text for u in after if u.message] == ["b"]
    assert await bot.get_updates(offset=first[-1].update_id + 1, timeout=0) == ()
    assert fake.pending_updates == []


async def test_long_poll_wakes_on_push_and_times_out(fake: FakeTelegram, bot: Bot) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await bot.get_updates(timeout=dtm.timedelta(milliseconds=200)) == ()
    assert loop.time() - start >= 0.2
    poll = asyncio.create_task(bot.get_updates(timeout=10))
    await fake.wait_for(lambda f: f.waiting_polls == 1)
    fake.push_message(42, "wake", user_id=7)
    updates = await asyncio.wait_for(poll, 2)
    assert [u.message.text for u in updates if u.message] == ["wake"]


async def test_stop_ends_a_waiting_long_poll() -> None:
    fake = FakeTelegram()
    await fake.start()
    async with Bot(fake.token, base_url=fake.base_url) as b:
        poll = asyncio.create_task(b.get_updates(timeout=30))
        await fake.wait_for(lambda f: f.waiting_polls == 1)
        await asyncio.wait_for(fake.stop(), 3)
        assert await asyncio.wait_for(poll, 2) == ()
    await fake.stop()  # idempotent


async def test_newer_poll_ends_the_older_with_conflict(fake: FakeTelegram, bot: Bot) -> None:
    older = asyncio.create_task(bot.get_updates(timeout=10))
    await fake.wait_for(lambda f: f.waiting_polls == 1)
    async with Bot(fake.token, base_url=fake.base_url) as other:
        newer = asyncio.create_task(other.get_updates(timeout=10))
        with pytest.raises(Conflict, match="terminated by other getUpdates"):
            await asyncio.wait_for(older, 2)
        fake.push_message(42, "x", user_id=7)
        assert len(await asyncio.wait_for(newer, 2)) == 1


async def test_allowed_updates_filter_and_persist(fake: FakeTelegram, bot: Bot) -> None:
    fake.push_update({"chat_member": {}})  # not delivered by default, as on Telegram
    assert await bot.get_updates(timeout=0) == ()
    fake.push_message(42, "plain", user_id=7)
    chat = {"id": 42, "type": "private"}
    fake.push_update({"edited_message": {"message_id": 1, "date": 1, "chat": chat, "text": "e"}})
    got = await bot.get_updates(timeout=0, allowed_updates=["edited_message"])
    assert [u.edited_message.text for u in got if u.edited_message] == ["e"]
    assert len(got) == 1 and len(fake.pending_updates) == 1  # the message was dropped
    fake.push_message(42, "later", user_id=7)
    assert await bot.get_updates(offset=got[0].update_id + 1, timeout=0) == ()  # persists


async def test_drop_pending_updates_on_delete_webhook(fake: FakeTelegram, bot: Bot) -> None:
    fake.push_message(42, "old", user_id=7)
    assert await bot.delete_webhook(drop_pending_updates=True) is True
    assert fake.pending_updates == []


async def test_replies_to_any_message_with_a_quote(fake: FakeTelegram, bot: Bot) -> None:
    question = fake.push_message(42, "what is 😀 love?", user_id=7)
    answer = await bot.send_message(42, "baby don't hurt me")
    await bot.edit_message_text("baby don't hurt me, no more", 42, answer.message_id)
    to_user = fake.push_message(42, "this", user_id=7, reply_to=question, quote="love")
    to_bot = fake.push_message(42, "that", user_id=7, reply_to=answer.message_id, quote="no more")
    to_last = fake.push_message(42, "and", user_id=7, reply_to_bot=True)
    fake.push_message(42, "again", user_id=7, reply_to=to_user)

    got = {u.message.message_id: u.message for u in await bot.get_updates(timeout=0) if u.message}
    mine, theirs, last = got[to_user], got[to_bot], got[to_last]
    assert mine.reply_to_message is not None and mine.reply_to_message.from_user is not None
    assert (
        mine.reply_to_message.text == "what is 😀 love?" and mine.reply_to_message.from_user.id == 7
    )
    assert mine.quote is not None and (mine.quote.text, mine.quote.is_manual) == ("love", True)
    assert mine.quote.position == 11  # in UTF-16 units: the emoji counts 2
    assert theirs.reply_to_message is not None and theirs.reply_to_message.from_user is not None
    assert theirs.reply_to_message.text == "baby don't hurt me, no more"  # as it is now
    assert theirs.reply_to_message.from_user.id == fake.bot_id
    assert theirs.quote is not None and theirs.quote.position == 20
    assert last.reply_to_message is not None and last.quote is None
    assert last.reply_to_message.message_id == answer.message_id
    nested = fake.pending_updates[-1]["message"]["reply_to_message"]
    assert nested["message_id"] == to_user and "reply_to_message" not in nested  # as Telegram


def test_replies_that_cannot_be_are_refused() -> None:
    fake = FakeTelegram()
    mid = fake.push_message(42, "hello", user_id=7)
    with pytest.raises(ValueError, match="no message 9 in chat 42"):
        fake.push_message(42, "x", user_id=7, reply_to=9)
    with pytest.raises(ValueError, match="not both"):
        fake.push_message(42, "x", user_id=7, reply_to=mid, reply_to_bot=True)
    with pytest.raises(ValueError, match="a quote needs reply_to"):
        fake.push_message(42, "x", user_id=7, quote="hello")
    with pytest.raises(ValueError, match="'bye' is not in the replied message 'hello'"):
        fake.push_message(42, "x", user_id=7, reply_to=mid, quote="bye")
    assert len(fake.pending_updates) == 1


# -- files users send ------------------------------------------------------------
async def test_media_messages_parse_as_ptb_objects(fake: FakeTelegram, bot: Bot) -> None:
    fake.push_message(
        42, None, user_id=7, extra=fake.photo_extra(b"img", caption="hi @soul_test_bot")
    )
    pdf = fake.document_extra(b"%PDF", file_name="a.pdf", mime_type="application/pdf")
    fake.push_message(42, None, user_id=7, extra=pdf)
    fake.push_message(42, None, user_id=7, extra=fake.sticker_extra(b"RIFF", emoji="😀"))
    photo, document, sticker = await bot.get_updates(timeout=0)

    assert filters.PHOTO.check_update(photo) and photo.message is not None
    sizes = photo.message.photo
    assert [(p.width, p.height, p.file_size) for p in sizes] == [
        (90, 67, len(jpeg(90, 67, exif_bytes=0))),
        (320, 240, len(jpeg(320, 240, exif_bytes=0))),
        (1280, 960, 3),
    ]
    assert len({p.file_id for p in sizes}) == len({p.file_unique_id for p in sizes}) == 3
    assert photo.message.caption == "hi @soul_test_bot"
    assert list(photo.message.parse_caption_entities(["mention"]).values()) == ["@soul_test_bot"]
    assert filters.Document.PDF.check_update(document) and document.message is not None
    doc = document.message.document
    assert doc is not None and (doc.file_name, doc.file_size) == ("a.pdf", 4)
    assert document.message.caption is None
    assert filters.Sticker.STATIC.check_update(sticker) and sticker.message is not None
    st = sticker.message.sticker
    assert st is not None and (st.type, st.emoji, st.width, st.height) == (
        "regular",
        "😀",
        512,
        512,
    )
    again = Update.de_json(fake.pending_updates[2], bot)  # the raw update, parsed directly
    assert again.message is not None and again.message.sticker == st


async def test_get_file_and_download(fake: FakeTelegram, bot: Bot) -> None:
    file_id = fake.add_file(b"more than announced", declared_size=4)
    file = await bot.get_file(file_id)
    assert isinstance(file, File) and file.file_id == file_id and file.file_size == 4
    assert file.file_path == f"{fake.base_file_url}{fake.token}/files/file_1"
    assert await file.download_as_bytearray() == b"more than announced"
    assert fake.calls_of("getFile")[0].result == {
        "file_id": file_id,
        "file_unique_id": "U" + file_id,
        "file_size": 4,
        "file_path": "files/file_1",
    }
    doc = fake.document_extra(b"abc", declared_size=10**9)["document"]
    assert (await bot.get_file(doc["file_id"])).file_size == 10**9
    assert [d.file_path for d in fake.downloads] == ["files/file_1"]


async def test_get_file_and_downloads_refuse_as_telegram_does(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"^Invalid file_id$"):
        await bot.get_file("NOPE")
    assert await bot.get_file(fake.add_file(bytes(MAX_DOWNLOAD_BYTES)))
    with pytest.raises(BadRequest, match=r"^File is too big$"):
        await bot.get_file(fake.add_file(bytes(MAX_DOWNLOAD_BYTES + 1)))
    unknown = File("X", "UX", file_path=f"{fake.base_file_url}{fake.token}/files/none")
    unknown.set_bot(bot)
    with pytest.raises(InvalidToken, match=r"^Not Found$"):
        await unknown.download_as_bytearray()
    wrong_token = f"{fake.base_file_url}123:WRONG/files/file_1"
    async with aiohttp.ClientSession() as http, http.get(wrong_token) as r:
        body = await r.json()
    assert r.status == 404
    assert body == {"ok": False, "error_code": 404, "description": "Not Found"}
    assert [(d.file_path, d.status) for d in fake.downloads] == [
        ("files/none", 404),
        ("files/file_1", 404),
    ]


async def test_a_hung_download_times_out_then_one_works(fake: FakeTelegram, bot: Bot) -> None:
    file = await bot.get_file(fake.add_file(b"data"))
    fake.hang_downloads(30)
    with pytest.raises(TimedOut):
        await file.download_as_bytearray(read_timeout=0.2)
    await fake.wait_for(lambda f: len(f.downloads) == 1, what="the hung download given up")
    assert await file.download_as_bytearray() == b"data"  # only the next one hung
    assert [d.status for d in fake.downloads] == [CLIENT_CLOSED, 200]


# -- drafts and edits ------------------------------------------------------------
async def test_drafts_then_one_message(fake: FakeTelegram, bot: Bot) -> None:
    fake.push_message(42, "hi", user_id=7)
    assert await bot.send_message_draft(42, 1, "") is True  # "Thinking..."
    assert await bot.send_message_draft(42, 1, "He")
    assert await bot.send_message_draft(42, 1, "<b>Hel</b>lo", parse_mode="HTML")
    assert await bot.send_message_draft(42, 2, "in a topic", message_thread_id=3)
    msg = await bot.send_message(42, "Hello")

    assert [(d.chat_id, d.draft_id, d.text, d.message_thread_id) for d in fake.drafts] == [
        (42, 1, "", None),
        (42, 1, "He", None),
        (42, 1, "Hello", None),
        (42, 2, "in a topic", 3),
    ]
    times = [d.t for d in fake.drafts] + [fake.calls_of("sendMessage")[0].t]
    assert times == sorted(times)
    assert msg.message_id == 2  # drafts make no message
    assert [m["text"] for m in fake.bot_messages(42)] == ["Hello"]


async def test_drafts_are_refused_as_telegram_does(fake: FakeTelegram, bot: Bot) -> None:
    fake.push_message(42, "hi", user_id=7)
    fake.push_message(GROUP, "hi", user_id=7, chat_type="supergroup")
    # PTB str.capitalize()s the description: "TEXTDRAFT_PEER_INVALID" arrives lowered.
    with pytest.raises(BadRequest, match=r"^Chat not found$"):
        await bot.send_message_draft(4242, 1, "x")
    with pytest.raises(BadRequest, match=r"^Textdraft_peer_invalid$"):
        await bot.send_message_draft(GROUP, 1, "x")
    with pytest.raises(BadRequest, match=r"^Draft_id must be non-zero$"):
        await bot.send_message_draft(42, 0, "x")
    with pytest.raises(BadRequest, match=r"^Message is too long$"):
        await bot.send_message_draft(42, 1, "😀" * 2049)
    assert await bot.send_message_draft(42, 1, f"<b>{'a' * 4096}</b>", parse_mode="HTML")
    assert [len(d.text) for d in fake.drafts] == [4096]  # the limit applies once parsed


async def test_edits_are_recorded_and_refused_as_telegram_does(
    fake: FakeTelegram, bot: Bot
) -> None:
    sent = await bot.send_message(42, "v1")
    mid = sent.message_id
    await bot.edit_message_text("v2", 42, mid)
    await bot.edit_message_text("<i>v3</i>", 42, mid, parse_mode="HTML")
    with pytest.raises(BadRequest, match=r"^Message is not modified: specified new message"):
        await bot.edit_message_text("v3", 42, mid)
    with pytest.raises(BadRequest, match=r"^Message_too_long$"):  # not sendMessage's wording
        await bot.edit_message_text("a" * 4097, 42, mid)

    assert [(e.chat_id, e.message_id, e.text) for e in fake.edits] == [
        (42, mid, "v2"),
        (42, mid, "v3"),
    ]
    assert fake.edits[0].t <= fake.edits[1].t
    assert [m["text"] for m in fake.bot_messages(42)] == ["v3"]  # the final text
    assert [m["text"] for m in fake.sent] == ["v1"]  # what was sent


async def test_deletes_are_recorded_and_refused_as_telegram_does(
    fake: FakeTelegram, bot: Bot
) -> None:
    first, second = await bot.send_message(42, "one"), await bot.send_message(42, "two")
    in_group = await bot.send_message(GROUP, "group")
    assert await bot.delete_message(42, first.message_id) is True
    assert await bot.delete_message(GROUP, in_group.message_id) is True
    assert [(d.chat_id, d.message_id) for d in fake.deleted] == [
        (42, first.message_id),
        (GROUP, in_group.message_id),
    ]
    assert fake.deleted[0].t <= fake.deleted[1].t
    assert [m["text"] for m in fake.bot_messages(42)] == ["two"]  # the deleted one left out
    assert fake.bot_messages(GROUP) == []
    assert [m["text"] for m in fake.sent] == ["one", "two", "group"]  # what was sent

    with pytest.raises(BadRequest, match=r"^Message to delete not found$"):
        await bot.delete_message(42, first.message_id)  # already gone
    with pytest.raises(BadRequest, match=r"^Message to delete not found$"):
        await bot.delete_message(42, 999)
    with pytest.raises(BadRequest, match=r"^Message to delete not found$"):
        await bot.delete_message(GROUP, second.message_id)  # the id, in another chat
    with pytest.raises(BadRequest, match=r"^Message to edit not found$"):
        await bot.edit_message_text("back?", 42, first.message_id)
    theirs = fake.push_message(GROUP, "mine", user_id=7, chat_type="supergroup")
    with pytest.raises(BadRequest, match=r"^Message can't be deleted$"):  # not an admin
        await bot.delete_message(GROUP, theirs)
    private = fake.push_message(42, "oops", user_id=42)
    assert await bot.delete_message(42, private) is True  # a private chat's are the bot's too
    assert [d.message_id for d in fake.deleted][2:] == [private]
    calls = fake.calls_of("deleteMessage")
    assert [c.status for c in calls] == [200, 200, 400, 400, 400, 400, 200]
    assert calls[0].params == {"chat_id": "42", "message_id": str(first.message_id)}


async def test_someone_else_deletes_a_message_mid_stream(fake: FakeTelegram, bot: Bot) -> None:
    preview = await bot.send_message(GROUP, "half an answer")
    fake.delete_message(GROUP, preview.message_id)
    with pytest.raises(BadRequest, match=r"^Message to edit not found$"):
        await bot.edit_message_text("the whole answer", GROUP, preview.message_id)
    with pytest.raises(BadRequest, match=r"^Message to delete not found$"):
        await bot.delete_message(GROUP, preview.message_id)
    assert fake.bot_messages(GROUP) == []
    assert [(d.chat_id, d.message_id) for d in fake.deleted] == [(GROUP, preview.message_id)]
    with pytest.raises(ValueError, match="no message"):
        fake.delete_message(GROUP, preview.message_id)


async def test_a_held_send_is_done_late_or_not_at_all(fake: FakeTelegram, bot: Bot) -> None:
    fake.hold_next("sendMessage", 0.3, when=lambda p: p["text"] == "slow")
    started = asyncio.get_running_loop().time()
    fast, slow = await asyncio.gather(bot.send_message(42, "fast"), bot.send_message(42, "slow"))
    assert asyncio.get_running_loop().time() - started >= 0.3
    assert [m["text"] for m in fake.sent] == ["fast", "slow"]  # done once the hold was over
    assert fast.message_id < slow.message_id and fake.held == 0

    fake.hold_next("sendMessage", 30)
    sending = asyncio.create_task(bot.send_message(42, "never"))
    await fake.wait_for(lambda f: f.held == 1, what="the held call")
    sending.cancel()  # the client hangs up: the call is not done
    await fake.wait_for(lambda f: f.held == 0, what="the hang-up")
    assert [m["text"] for m in fake.bot_messages(42)] == ["fast", "slow"]
    assert fake.calls_of("sendMessage")[-1].status == CLIENT_CLOSED
    await bot.send_message(42, "next")  # one call held, then none
    assert [m["text"] for m in fake.sent][-1] == "next"


async def test_an_edit_sets_or_removes_the_keyboard(fake: FakeTelegram, bot: Bot) -> None:
    stop = InlineKeyboardMarkup([[InlineKeyboardButton("stop", callback_data="stop")]])
    sent = await bot.send_message(42, "working", reply_markup=stop)
    bare = await bot.edit_message_text("working", 42, sent.message_id)  # keyboard removed
    assert isinstance(bare, Message) and bare.reply_markup is None
    with pytest.raises(BadRequest, match=r"^Message is not modified"):
        await bot.edit_message_text("working", 42, sent.message_id)
    again = await bot.edit_message_text("working", 42, sent.message_id, reply_markup=stop)
    assert isinstance(again, Message) and again.reply_markup is not None
    assert again.reply_markup.inline_keyboard[0][0].text == "stop"
    assert len(fake.edits) == 2


async def test_get_me_tells_the_privacy_mode(fake: FakeTelegram) -> None:
    async with Bot(fake.token, base_url=fake.base_url) as bot:  # initialize() calls getMe
        assert bot.can_read_all_group_messages is False  # privacy mode, as by default
        assert bot.can_join_groups is True and bot.supports_inline_queries is False
    fake.privacy_mode = False
    fake.supports_inline_queries = True
    async with Bot(fake.token, base_url=fake.base_url) as bot:
        assert bot.can_read_all_group_messages is True and bot.supports_inline_queries is True


# -- errors ----------------------------------------------------------------------
async def test_wrong_token_is_invalid(fake: FakeTelegram) -> None:
    with pytest.raises(InvalidToken, match="Unauthorized"):
        await Bot("123456:WRONG", base_url=fake.base_url).get_me()
    app = ApplicationBuilder().token("1:nope").base_url(fake.base_url).build()
    with pytest.raises(InvalidToken):
        await app.initialize()
    assert {c.status for c in fake.calls} == {401}


async def test_retry_after_and_scripted_failures(
    fake: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # RetryAfter.retry_after as a timedelta
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 7", retry_after=7)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(42, "hi")
    assert caught.value.retry_after == dtm.timedelta(seconds=7)
    await bot.send_message(42, "hi")
    assert [c.status for c in fake.calls_of("sendMessage")] == [429, 200]
    assert len(fake.sent) == 1

    only_chat_5: Callable[[dict[str, Any]], bool] = lambda p: p["chat_id"] == "5"  # noqa: E731
    fake.fail_next("sendMessage", 400, "Bad Request: chat not found", times=2, when=only_chat_5)
    await bot.send_message(6, "other chat is fine")
    for _ in range(2):
        with pytest.raises(BadRequest, match=r"^Chat not found$"):
            await bot.send_message(5, "x")
    await bot.send_message(5, "x")
    assert [s["chat_id"] for s in fake.sent] == ["42", "6", "5"]


async def test_server_errors_and_hang_ups_are_network_errors(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendMessage", 502, "Bad Gateway")
    with pytest.raises(NetworkError, match="Bad Gateway") as caught:
        await bot.send_message(42, "one")
    assert not isinstance(caught.value, BadRequest)  # PTB's BadRequest is a NetworkError too
    fake.drop_next("sendMessage", times=2, when=lambda p: p["text"] == "two")
    await bot.send_message(42, "other text is answered")
    for _ in range(2):
        with pytest.raises(NetworkError, match="Server disconnected"):
            await bot.send_message(42, "two")
    await bot.send_message(42, "two")
    assert [c.status for c in fake.calls_of("sendMessage")] == [502, 200, DROPPED, DROPPED, 200]
    assert [m["text"] for m in fake.sent] == ["other text is answered", "two"]


async def test_another_poller_gets_conflicts(fake: FakeTelegram, bot: Bot) -> None:
    fake.conflict_next_polls(2)
    for _ in range(2):
        with pytest.raises(Conflict, match="terminated by other getUpdates"):
            await bot.get_updates(timeout=0)
    fake.push_message(42, "mine again", user_id=7)
    assert [u.message.text for u in await bot.get_updates(timeout=0) if u.message] == ["mine again"]
    assert [c.status for c in fake.calls_of("getUpdates")] == [409, 409, 200]


async def test_strict_html_rejects_bad_markup() -> None:
    # PTB strips "Bad Request: " and str.capitalize()s the rest of the description.
    async with (
        FakeTelegram(strict_html=True) as fake,
        Bot(fake.token, base_url=fake.base_url) as bot,
    ):
        with pytest.raises(BadRequest, match=r"^Can't parse entities: can't find end tag"):
            await bot.send_message(42, "<b>bold", parse_mode="HTML")
        with pytest.raises(BadRequest, match='unsupported start tag "div" at byte offset 0'):
            await bot.send_message(42, "<div>x</div>", parse_mode="HTML")
        plain = await bot.send_message(42, "<b>bold")  # the fallback: no parse_mode
        fine = await bot.send_message(42, "<b>1 &lt; 2</b> &amp; <a href='x>y'>l</a>", "HTML")
    assert plain.text == "<b>bold" and fine.text == "1 < 2 & l"
    assert len(fake.sent) == 2


async def test_lenient_html_by_default(fake: FakeTelegram, bot: Bot) -> None:
    msg = await bot.send_message(42, "<b>bold", parse_mode="HTML")
    assert msg.text == "<b>bold"


async def test_text_limits_count_utf16_units(bot: Bot) -> None:
    assert (await bot.send_message(42, "a" * 4096)).text == "a" * 4096
    for text in ("a" * 4097, "😀" * 2049):  # 2049 emoji are 4098 UTF-16 units
        with pytest.raises(BadRequest, match=r"^Message is too long$"):
            await bot.send_message(42, text)
    for text in ("", "  \n"):
        with pytest.raises(BadRequest, match=r"^Message text is empty$"):
            await bot.send_message(42, text)


async def test_edit_message_text(fake: FakeTelegram, bot: Bot) -> None:
    sent = await bot.send_message(42, "draft")
    edited = await bot.edit_message_text("final", chat_id=42, message_id=sent.message_id)
    assert isinstance(edited, Message) and edited.text == "final" and edited.edit_date
    with pytest.raises(BadRequest, match=r"^Message is not modified: "):
        await bot.edit_message_text("final", chat_id=42, message_id=sent.message_id)
    theirs = fake.push_message(42, "mine", user_id=7)
    with pytest.raises(BadRequest, match=r"^Message can't be edited$"):
        await bot.edit_message_text("x", chat_id=42, message_id=theirs)
    with pytest.raises(BadRequest, match=r"^Message to edit not found$"):
        await bot.edit_message_text("x", chat_id=42, message_id=999)


async def test_replies_carry_the_replied_message(fake: FakeTelegram, bot: Bot) -> None:
    mid = fake.push_message(42, "question", user_id=7)
    msg = await bot.send_message(42, "answer", reply_parameters=ReplyParameters(mid))
    assert msg.reply_to_message is not None and msg.reply_to_message.text == "question"
    unknown = await bot.send_message(42, "answer", reply_parameters=ReplyParameters(555))
    assert unknown.reply_to_message is not None and unknown.reply_to_message.message_id == 555
    assert fake.sent[0]["reply_parameters"] == {"message_id": mid}


async def test_send_document_takes_a_multipart_upload(fake: FakeTelegram, bot: Bot) -> None:
    mid = fake.push_message(42, "send it", user_id=7)
    upload = InputFile(b"# Notes\n\nhello", filename="notes.md")
    upload.mimetype = "text/markdown"
    msg = await bot.send_document(
        42, upload, caption="<b>yours</b>", parse_mode="HTML",
        reply_parameters=ReplyParameters(mid),
    )  # fmt: skip
    assert msg.document is not None and msg.document.file_name == "notes.md"
    assert (msg.document.mime_type, msg.document.file_size) == ("text/markdown", 14)
    assert msg.caption == "yours"
    assert msg.reply_to_message is not None and msg.reply_to_message.text == "send it"
    [doc] = fake.documents
    assert (doc.chat_id, doc.message_id, doc.caption) == (42, msg.message_id, "yours")
    assert (doc.file.field, doc.file.file_name, doc.file.data) == (
        "document",
        "notes.md",
        b"# Notes\n\nhello",
    )
    again = await bot.send_document(42, msg.document.file_id)  # a file_id it took before
    assert again.document is not None and again.document.file_name == "notes.md"
    assert [d.file.data for d in fake.documents] == [b"# Notes\n\nhello"] * 2
    assert fake.sent == []  # documents are not sendMessage calls


async def test_send_document_refuses_as_telegram_does(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"^File must be non-empty$"):
        await bot.send_document(42, InputFile(b"", filename="empty.md"))
    with pytest.raises(BadRequest, match=r"^Wrong file identifier/http url specified$"):
        await bot.send_document(42, "NOPE")
    with pytest.raises(BadRequest, match=r"^Message caption is too long$"):
        await bot.send_document(42, InputFile(b"x", filename="a.md"), caption="x" * 1025)
    fake.max_upload_bytes = 1000
    with pytest.raises(NetworkError, match="Request Entity Too Large"):
        await bot.send_document(42, InputFile(b"x" * 1001, filename="big"))
    async with aiohttp.ClientSession() as http:
        url = f"{fake.base_url}{fake.token}/sendDocument"
        async with http.post(url, json={"chat_id": 42}) as r:
            body = await r.json()
    assert body["description"] == "Bad Request: there is no document in the request"
    assert fake.documents == []
    assert [c.status for c in fake.calls_of("sendDocument")] == [400, 400, 400, 413, 400]


async def test_small_methods_and_unknown_ones(fake: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert (me.id, me.username, me.is_bot) == (fake.bot_id, "soul_test_bot", True)
    assert await bot.set_my_commands([("start", "Begin"), ("help", "Help")])
    assert fake.commands == [
        {"command": "start", "description": "Begin"},
        {"command": "help", "description": "Help"},
    ]
    assert fake.calls_of("setMyCommands")[0].params["commands"] == fake.commands
    assert await bot.delete_my_commands() and fake.commands == []
    assert await bot.send_chat_action(42, "typing")
    with pytest.raises(BadRequest, match=r"^Wrong parameter action in request$"):
        await bot.send_chat_action(42, "dancing")
    assert await bot.set_my_description("a soul")
    with pytest.raises(EndPointNotFound):
        await bot.do_api_request("frobnicate", api_kwargs={"x": 1})
    assert fake.calls_of("frobnicate")[0].status == 404


async def test_json_and_query_bodies(fake: FakeTelegram) -> None:
    url = f"{fake.base_url}{fake.token}"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/sendMessage", json={"chat_id": 42, "text": "[1]"}) as r:
            assert r.status == 200 and (await r.json())["result"]["text"] == "[1]"
        async with http.get(f"{url}/getme?x=1") as r:
            assert (await r.json())["result"]["id"] == fake.bot_id
        async with http.post(f"{url}/nope") as r:
            body = await r.json()
    assert r.status == 404
    assert body == {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
    assert fake.sent == [{"chat_id": 42, "text": "[1]"}]  # JSON bodies keep their types


async def test_wait_for_names_what_it_waited_for(fake: FakeTelegram) -> None:
    with pytest.raises(TimeoutError, match="the moon"):
        await fake.wait_for(lambda f: False, 0.05, what="the moon")
    with pytest.raises(TimeoutError, match=r"lambda f: len\(f.sent\) > 3"):
        await fake.wait_for(lambda f: len(f.sent) > 3, 0.05)
    with pytest.raises(TimeoutError, match="2 successful sendMessage"):
        await fake.wait_sent(2, timeout=0.05)


def test_misuse_is_refused() -> None:
    with pytest.raises(RuntimeError, match="before start"):
        _ = FakeTelegram().base_url


# -- the pure helpers ------------------------------------------------------------
@pytest.mark.parametrize(
    ("html", "plain"),
    [
        ("<b>x</b> <i>y</i>", "x y"),
        ("<pre><code class='language-py'>a</code></pre>", "a"),
        ('<span class="tg-spoiler">s</span>', "s"),
        ("a & b &#128512; &x; &quot;", 'a & b 😀 &x; "'),
        ("<B>x</>", "x"),
    ],
)
def test_parse_html_accepts(html: str, plain: str) -> None:
    assert parse_html(html) == plain


@pytest.mark.parametrize(
    ("html", "error"),
    [
        ("<b>x", 'Can\'t find end tag corresponding to start tag "b"'),
        ("x</b>", "Unexpected end tag at byte offset 1"),
        ("<b><i>x</b></i>", 'Unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
        ("1 < 2", 'Unsupported start tag "" at byte offset 2'),
        ("é<p>", 'Unsupported start tag "p" at byte offset 2'),
        ("<b", "Unclosed start tag at byte offset 0"),
    ],
)
def test_parse_html_rejects(html: str, error: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_html(html)
    assert str(caught.value) == error


def test_auto_entities() -> None:
    text = "/ask@soul_test_bot 😀 @someone_else"
    assert auto_entities(text) == [
        {"type": "bot_command", "offset": 0, "length": 18},
        {"type": "mention", "offset": 22, "length": 13},
    ]
    assert auto_entities("mail me@example.com") == []
    assert utf16_len("😀a") == 3


# -- webhooks ----------------------------------------------------------------------
class Receiver(LoopbackServer):
    """A webhook endpoint on 127.0.0.1: keeps each post (headers, body) and answers
    the statuses in `answers` first, then 200."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], JSON]] = []
        self.answers: list[int] = []

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._take)
        await self._listen(app, port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/hook"

    async def _take(self, request: web.Request) -> web.Response:
        self.posts.append((dict(request.headers), await request.json()))
        return web.Response(status=self.answers.pop(0) if self.answers else 200)


def texts_of(receiver: Receiver) -> list[str]:
    return [body["message"]["text"] for _, body in receiver.posts]


async def test_a_webhook_gets_the_updates_in_order_with_the_secret(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.push_message(42, "queued before", user_id=7)
    async with Receiver() as hook:
        assert await bot.set_webhook(hook.url, secret_token="s3cret", allowed_updates=["message"])
        fake.push_message(42, "one", user_id=7)
        fake.push_message(42, "two", user_id=7)
        await fake.wait_for(lambda f: len(f.pushes) == 3, what="three posts")
        info = await bot.get_webhook_info()
    assert texts_of(hook) == ["queued before", "one", "two"]
    headers = hook.posts[0][0]
    assert headers["X-Telegram-Bot-Api-Secret-Token"] == "s3cret"
    assert headers["Content-Type"] == "application/json"  # exactly: PTB refuses anything else
    assert [p.status for p in fake.pushes] == [200, 200, 200] and fake.pending_updates == []
    assert (info.url, info.pending_update_count, info.last_error_date) == (hook.url, 0, None)
    assert info.allowed_updates == ("message",) and info.max_connections == 40
    assert fake.webhook is not None and "s3cret" not in repr(fake.webhook)


async def test_getupdates_is_refused_while_a_webhook_is_set(fake: FakeTelegram, bot: Bot) -> None:
    waiting = asyncio.create_task(bot.get_updates(timeout=10))
    await fake.wait_for(lambda f: f.waiting_polls == 1)
    await bot.set_webhook("https://bot.example.org/telegram", secret_token="s")
    with pytest.raises(Conflict, match="can't use getUpdates method while webhook is active"):
        await asyncio.wait_for(waiting, 2)
    fake.push_message(42, "kept for later", user_id=7)
    with pytest.raises(Conflict, match="use deleteWebhook to delete the webhook first"):
        await bot.get_updates(timeout=0)
    assert await bot.delete_webhook()
    assert (await bot.get_webhook_info()).url == ""
    got = await bot.get_updates(timeout=0)  # the push to example.org failed: still pending
    assert [u.message.text for u in got if u.message] == ["kept for later"]


async def test_a_failing_webhook_is_tried_again_and_its_error_told(
    fake: FakeTelegram, bot: Bot
) -> None:
    async with Receiver() as hook:
        hook.answers = [502, 502]
        await bot.set_webhook(hook.url)
        fake.push_message(42, "third time lucky", user_id=7)
        await fake.wait_for(lambda f: [p.status for p in f.pushes] == [502, 502, 200])
        info = await bot.get_webhook_info()
    assert info.last_error_message == "Wrong response from the webhook: 502 Bad Gateway"
    assert info.last_error_date is not None and info.pending_update_count == 0
    assert "X-Telegram-Bot-Api-Secret-Token" not in hook.posts[0][0]  # no secret was set
    assert texts_of(hook) == ["third time lucky"] * 3


async def test_an_unreachable_webhook_keeps_the_update_until_one_works(
    fake: FakeTelegram, bot: Bot
) -> None:
    await bot.set_webhook(f"http://127.0.0.1:{free_port()}/nobody")
    fake.push_message(42, "anyone?", user_id=7)
    await fake.wait_for(lambda f: len(f.pushes) == fake.push_tries, what="every try")
    info = await bot.get_webhook_info()
    assert info.last_error_message == "Connection refused" and info.pending_update_count == 1
    async with Receiver() as hook:
        await bot.set_webhook(hook.url)  # a new webhook: the update is posted again
        await fake.wait_for(lambda f: f.pushes[-1].status == 200, what="the post that works")
    assert texts_of(hook) == ["anyone?"] and fake.pending_updates == []
    assert await bot.delete_webhook()
    assert (await bot.get_webhook_info()).last_error_message is None


async def test_set_webhook_refuses_as_telegram_does(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"(?i)an https url must be provided"):
        await bot.set_webhook("http://bot.example.org/telegram")
    with pytest.raises(BadRequest, match="unallowed characters"):
        await bot.set_webhook("https://bot.example.org/telegram", secret_token="no spaces")
    assert fake.webhook is None
    fake.push_message(42, "old", user_id=7)
    await bot.set_webhook("https://bot.example.org/telegram", drop_pending_updates=True)
    assert fake.pending_updates == [] and fake.webhook is not None
    assert await bot.set_webhook("")  # an empty URL deletes it
    assert fake.webhook is None


async def test_ptbs_webhook_server_takes_only_posts_with_the_secret(fake: FakeTelegram) -> None:
    seen: list[str] = []
    handled = asyncio.Condition()

    async def keep(update: Update, context: Context) -> None:
        assert update.message is not None and update.message.text is not None
        async with handled:
            seen.append(update.message.text)
            handled.notify_all()

    port = free_port()
    app = ApplicationBuilder().token(fake.token).base_url(fake.base_url).build()
    app.add_handler(MessageHandler(filters.TEXT, keep))
    message = {"message_id": 1, "date": 1, "chat": {"id": 42, "type": "private"}, "text": "x"}
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_webhook(listen="127.0.0.1", port=port, url_path="hook",
                                        webhook_url=f"http://127.0.0.1:{port}/hook",
                                        secret_token="s3cret")  # fmt: skip
        assert await fake.post_to_webhook({"message": message}, secret="wrong") == 403
        assert await fake.post_to_webhook({"message": message}, secret=None) == 403
        assert await fake.post_to_webhook({"message": {"oops": 1}}, secret="s3cret") == 400
        fake.push_message(42, "through the front door", user_id=7)
        async with asyncio.timeout(5), handled:
            await handled.wait_for(lambda: bool(seen))
        await app.updater.stop()
        await app.stop()
    assert seen == ["through the front door"]
    assert [c.method for c in fake.calls] == ["getMe", "setWebhook"]  # no deleteWebhook
    assert fake.calls[1].params == {"url": f"http://127.0.0.1:{port}/hook",
                                    "max_connections": "40", "secret_token": "s3cret"}  # fmt: skip


async def test_a_message_older_than_48_hours_is_edited_but_not_deleted(
    fake: FakeTelegram, bot: Bot
) -> None:
    old, young = await bot.send_message(42, "old"), await bot.send_message(42, "young")
    fake.age(42, old.message_id, 48 * 3600 + 60)
    fake.age(42, young.message_id, 47 * 3600)
    with pytest.raises(BadRequest, match=r"^Message can't be deleted for everyone$"):
        await bot.delete_message(42, old.message_id)
    await bot.edit_message_text("old, edited", 42, old.message_id)  # editing has no age limit
    assert await bot.delete_message(42, young.message_id) is True
    assert [m["text"] for m in fake.bot_messages(42)] == ["old, edited"]
