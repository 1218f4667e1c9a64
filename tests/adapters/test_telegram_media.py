"""The Telegram adapter on its own (no runtime): the real python-telegram-bot
against the Bot API fake, with a `deliver` that collects what arrives. What
a message carries (every group message, captions, photos, image files,
stickers, quotes), what `send` returns, streaming (drafts in a DM, edits in a
group) and privacy mode."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from adapters import texts
from adapters.retry import Backoff
from adapters.split import split_message, utf16_len
from adapters.telegram_adapter import LIMIT, TelegramAdapter, privacy_mode_on
from adapters.telegram_format import to_html
from bot.types import IMAGE_BYTES, Attachment, Outbound, Quote
from tests.fakes.images import jpeg
from tests.fakes.telegram_fake import FakeTelegram, parse_html
from tests.kit import Inbox, capture_logs, delivering, wait_until

DM = 1
GROUP = -100
FAST = Backoff(first_s=0.01, max_s=0.02)
JITTER_S = 0.05  # the fake times arrivals; a request may reach it a little early or late
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
JPEG = b"\xff\xd8\xff\xe0" + b"jpeg bytes " * 300


@asynccontextmanager
async def telegram(
    *, privacy_mode: bool = True, **options: object
) -> AsyncIterator[tuple[FakeTelegram, TelegramAdapter, Inbox]]:
    async with FakeTelegram() as tg:
        tg.privacy_mode = privacy_mode
        adapter = TelegramAdapter(
            tg.token, tg.base_url, poll_timeout_s=1, backoff=FAST,
            base_file_url=tg.base_file_url, **options,  # type: ignore[arg-type]
        )  # fmt: skip
        async with delivering(adapter) as inbox:
            yield tg, adapter, inbox


def in_group(tg: FakeTelegram, text: str | None, user_id: int = 5, **kwargs: object) -> int:
    return tg.push_message(GROUP, text, user_id=user_id, chat_type="supergroup", **kwargs)  # type: ignore[arg-type]


# -- what arrives ---------------------------------------------------------------------


async def test_every_group_message_arrives_but_commands_for_other_bots() -> None:
    async with telegram() as (tg, _, got):
        in_group(tg, "just chatting")
        in_group(tg, "/help@other_bot")
        in_group(tg, None, extra=tg.document_extra(b"%PDF-1.4", mime_type="application/pdf"))
        in_group(tg, None, extra={"voice": {"file_id": "v", "file_unique_id": "v", "duration": 2}})
        in_group(tg, "last one")
        inbounds = await got.wait(4)
    chatting, pdf, voice, last = inbounds
    assert chatting.text == "just chatting" and not chatting.is_dm
    assert not chatting.mentions_bot and not chatting.reply_to_bot and not chatting.media
    assert chatting.chat_id == str(GROUP) and chatting.quote is None
    assert chatting.reply_to_id is None
    assert pdf.media and pdf.text == "" and pdf.images == ()
    assert not voice.media and voice.text == "" and voice.audio[0].kind == "voice"
    assert (voice.audio[0].seconds, voice.audio[0].mime) == (2, "audio/ogg")
    assert last.text == "last one"
    assert len(got.got) == 4


async def test_a_photo_is_one_media_in_the_largest_size_that_fits() -> None:
    async with telegram() as (tg, _, got):
        tg.push_message(DM, None, user_id=DM, extra=tg.photo_extra(JPEG))
        [inbound] = await got.wait(1)
        [media] = inbound.images
        assert (media.kind, media.mime, media.size) == ("photo", "image/jpeg", len(JPEG))
        assert await media.fetch() == JPEG
    assert inbound.is_dm and inbound.text == "" and not inbound.media


async def test_a_smaller_size_is_taken_when_the_largest_is_too_large() -> None:
    async with telegram() as (tg, _, got):
        extra = tg.photo_extra(JPEG, width=1280, height=960, declared_size=IMAGE_BYTES + 1)
        tg.push_message(DM, None, user_id=DM, extra=extra)
        [inbound] = await got.wait(1)
        [media] = inbound.images
        data = await media.fetch()
    assert data == jpeg(320, 240, exif_bytes=0) and media.size == len(data)


async def test_a_photo_too_large_in_every_size_is_left_to_the_core_to_refuse() -> None:
    declared = 6_396_314  # 6.1 MB
    async with telegram() as (tg, _, got):
        extra = tg.photo_extra(JPEG, width=80, height=60, declared_size=declared)
        tg.push_message(DM, None, user_id=DM, extra=extra)
        [inbound] = await got.wait(1)
    [media] = inbound.images  # its smallest size, announced as too large: the core refuses it
    assert media.size == declared and tg.downloads == []


async def test_an_image_file_is_an_image_and_other_files_are_media() -> None:
    async with telegram() as (tg, _, got):
        png = tg.document_extra(PNG, file_name="cat.png", mime_type="image/png",
                                caption="my cat")  # fmt: skip
        huge = tg.document_extra(PNG, file_name="big.webp", mime_type="image/webp",
                                 declared_size=8 * 2**20)  # fmt: skip
        tar = tg.document_extra(b"tar", file_name="x.tar", mime_type="application/x-tar")
        for extra in (png, huge, tar):
            tg.push_message(DM, None, user_id=DM, extra=extra)
        image, large, other = await got.wait(3)
        [media] = image.images
        assert await media.fetch() == PNG
    assert (media.kind, media.mime, media.size) == ("image", "image/png", len(PNG))
    assert image.text == "my cat" and not image.media
    [announced] = large.images
    assert (announced.mime, announced.size) == ("image/webp", 8 * 2**20) and not large.media
    assert other.media and other.images == () and other.text == ""


async def test_a_sticker_is_its_emoji() -> None:
    async with telegram() as (tg, _, got):
        tg.push_message(DM, None, user_id=DM, extra=tg.sticker_extra(b"webp", emoji="🐱"))
        tg.push_message(DM, None, user_id=DM, extra=tg.sticker_extra(b"webp", emoji=None))
        cat, plain = await got.wait(2)
    assert cat.text == "🐱" and not cat.media and cat.images == ()
    assert plain.text == "[sticker]" and not plain.media


async def test_a_caption_loses_the_bots_mention_and_counts_as_one() -> None:
    async with telegram() as (tg, _, got):
        in_group(tg, None, extra=tg.photo_extra(JPEG, caption="look @soul_test_bot at this"))
        in_group(tg, None, extra=tg.photo_extra(JPEG, caption="and @someone_else too"))
        mentioned, other = await got.wait(2)
    assert mentioned.text == "look at this" and mentioned.mentions_bot
    assert len(mentioned.images) == 1
    assert other.text == "and @someone_else too" and not other.mentions_bot


async def test_a_reply_carries_the_quote_and_a_partial_quote_wins() -> None:
    async with telegram() as (tg, adapter, got):
        said = in_group(tg, "the sky is green today", user_id=5, first_name="Bea")
        photo = in_group(tg, None, user_id=5, first_name="Bea", extra=tg.photo_extra(JPEG))
        sticker = in_group(tg, None, user_id=5, extra=tg.sticker_extra(b"webp", emoji="🐱"))
        await got.wait(3)
        [ours] = await adapter.send(Outbound("telegram", str(GROUP), "I said this"))
        in_group(tg, "no it is not", user_id=6, first_name="Cy", reply_to=said)
        in_group(tg, "green?", user_id=6, reply_to=said, quote="sky is green")
        in_group(tg, "nice", user_id=6, reply_to=photo)
        in_group(tg, "cute", user_id=6, reply_to=sticker)
        in_group(tg, "did you?", user_id=6, reply_to=int(ours))
        whole, partial, to_photo, to_sticker, to_bot = (await got.wait(8))[3:]
    assert whole.quote == Quote(user_name="Bea", text="the sky is green today", from_bot=False)
    assert whole.reply_to_id == str(said) and not whole.reply_to_bot
    assert partial.quote == Quote("Bea", "sky is green")
    assert to_photo.quote == Quote("Bea", "[photo]")
    assert to_sticker.quote is not None and to_sticker.quote.text == "[sticker 🐱]"
    assert to_bot.quote == Quote("Soul", "I said this", from_bot=True)
    assert to_bot.reply_to_bot and to_bot.reply_to_id == ours


async def test_a_forum_topics_root_is_no_quote() -> None:
    async with telegram() as (tg, _, got):
        root = in_group(tg, "Topic title")
        in_group(tg, "in the topic", message_thread_id=root, is_topic_message=True,
                 reply_to=root)  # fmt: skip
        _, inbound = await got.wait(2)
    assert inbound.thread_id == str(root)
    assert inbound.quote is None and inbound.reply_to_id is None and not inbound.reply_to_bot


# -- what is sent -----------------------------------------------------------------------


async def test_send_returns_the_ids_of_every_chunk_and_the_document() -> None:
    text = "\n\n".join(f"Part {name}. " + "words " * 600 for name in "AB")
    async with telegram() as (tg, adapter, got):
        asked = tg.push_message(DM, "hi", user_id=DM)
        await got.wait(1)
        file = Attachment("notes.md", b"# notes", "text/markdown")
        ids = await adapter.send(Outbound("telegram", str(DM), text, reply_to=str(asked),
                                          attachment=file))  # fmt: skip
    sent = [c.result["message_id"] for c in tg.calls_of("sendMessage") if c.status == 200]
    [document] = tg.documents
    assert len(sent) == 2
    assert ids == [str(n) for n in sent] + [str(document.message_id)]


async def test_streaming_off_gives_no_stream() -> None:
    async with telegram(streaming=False) as (_, adapter, _):
        assert adapter.stream(Outbound("telegram", str(DM), "")) is None
        assert adapter.stream(Outbound("telegram", str(GROUP), "")) is None


async def test_streaming_in_a_dm_is_drafts_then_one_message() -> None:
    final = "Here is **the** answer, in full."
    async with telegram() as (tg, adapter, got):
        asked = tg.push_message(DM, "tell me", user_id=DM)
        await got.wait(1)
        stream = adapter.stream(Outbound("telegram", str(DM), "", reply_to=str(asked)))
        assert stream is not None
        for n in (1, 2, 3):
            await stream.update(final[: 8 * n])
            await wait_until(lambda n=n: len(tg.drafts) >= n)  # type: ignore[misc]
        ids = await stream.finish(Outbound("telegram", str(DM), final, reply_to=str(asked)))
    drafts = tg.drafts
    shown = [split_message(final[: 8 * n], LIMIT, utf16_len)[-1] for n in (1, 2, 3)]
    assert [d.text for d in drafts] == [parse_html(to_html(text)) for text in shown]
    assert [d.text for d in drafts][-1] == "Here is the answer,"  # the HTML read
    assert len({d.draft_id for d in drafts}) == 1 and drafts[0].draft_id != 0
    assert all(b.t - a.t >= 1.0 - JITTER_S for a, b in itertools.pairwise(drafts))
    [message] = [c for c in tg.calls_of("sendMessage") if c.status == 200]
    assert message.params["text"] == to_html(final)
    assert message.params["reply_parameters"]["message_id"] == asked
    assert message.t - drafts[-1].t >= 1.0 - JITTER_S  # the pace holds for the end too
    assert ids == [str(message.result["message_id"])]


def long_answer() -> str:
    code = "\n".join(f"    line_{i} = {i} * 2  # some code" for i in range(150))
    return ("Intro paragraph. " * 150) + "\n\n```python\n" + code + "\n```\n\nThat was it."


async def test_streaming_in_a_group_edits_one_message_then_splits() -> None:
    final = long_answer()
    assert utf16_len(final) > LIMIT
    async with telegram() as (tg, adapter, got):
        asked = in_group(tg, "@soul_test_bot write some code")
        await got.wait(1)
        stream = adapter.stream(Outbound("telegram", str(GROUP), "", reply_to=str(asked)))
        assert stream is not None
        await stream.update(final[:1000])
        await wait_until(lambda: len(tg.sent) >= 1)
        await stream.update(final[:3200])  # into the code block
        await wait_until(lambda: len(tg.edits) >= 1)
        await stream.update(final[:5000])  # past the limit: a second message
        await wait_until(lambda: len(tg.sent) >= 2)
        ids = await stream.finish(Outbound("telegram", str(GROUP), final, reply_to=str(asked)))
        shown = [m["text"] for m in tg.bot_messages(GROUP)]
        posted = [c for c in tg.calls_of("sendMessage") if c.status == 200]
    chunks = split_message(final, LIMIT, utf16_len)
    assert len(chunks) >= 2 and shown == [parse_html(to_html(c)) for c in chunks]
    assert ids == [str(c.result["message_id"]) for c in posted]
    assert posted[0].params["reply_parameters"]["message_id"] == asked
    assert "reply_parameters" not in posted[1].params
    edited = [c for c in tg.calls_of("editMessageText") if c.status == 200]
    assert len(edited) == len(tg.edits) >= 2
    assert any("<pre>" in c.params["text"] for c in edited)
    for call in [*posted, *edited]:  # every text shown closes the code it opens
        html = call.params["text"]
        assert html.count("<pre>") == html.count("</pre>")
        assert utf16_len(parse_html(html)) <= LIMIT
    for message_id in ids:  # each message is posted, then edited at most once a second
        times = [c.t for c in posted if str(c.result["message_id"]) == message_id]
        times += [e.t for e in tg.edits if str(e.message_id) == message_id]
        assert all(b - a >= 1.0 - JITTER_S for a, b in itertools.pairwise(times))
    assert tg.edits[-1].t - tg.edits[0].t >= 1.0 - JITTER_S


# -- privacy mode -----------------------------------------------------------------------


async def test_privacy_mode_is_a_warning_and_a_note() -> None:
    with capture_logs() as logs:
        async with telegram(privacy_mode=True) as (_, adapter, _):
            assert adapter.notes() == [texts.PRIVACY_MODE]
    [warning] = [e for e in logs if e["event"] == "telegram.privacy_mode"]
    assert warning["log_level"] == "warning" and "/setprivacy -> Disable" in warning["fix"]
    with capture_logs() as logs:
        async with telegram(privacy_mode=False) as (_, adapter, _):
            assert adapter.notes() == []
    assert [e for e in logs if e["event"] == "telegram.privacy_mode"] == []


async def test_privacy_mode_on_asks_get_me_once() -> None:
    async with FakeTelegram() as tg:
        assert await privacy_mode_on(tg.token, tg.base_url) is True
        tg.privacy_mode = False
        assert await privacy_mode_on(tg.token, tg.base_url.removesuffix("/bot")) is False
        assert await privacy_mode_on("1:WRONG", tg.base_url) is None
        assert len(tg.calls_of("getMe")) == 3
        url = tg.base_url
    assert await privacy_mode_on(tg.token, url, timeout_s=2.0) is None  # nothing listens


async def test_refused_html_falls_back_to_plain_in_drafts_and_edits() -> None:
    refused = "Bad Request: can't parse entities: unsupported start tag"

    def html(params: dict[str, object]) -> bool:
        return params.get("parse_mode") == "HTML"

    async with telegram() as (tg, adapter, got):
        tg.push_message(DM, "hi", user_id=DM)
        in_group(tg, "@soul_test_bot hi")
        await got.wait(2)
        draft = adapter.stream(Outbound("telegram", str(DM), ""))
        edited = adapter.stream(Outbound("telegram", str(GROUP), ""))
        assert draft is not None and edited is not None
        tg.fail_next("sendMessageDraft", 400, refused, when=html)
        await draft.update("**so far**")
        await wait_until(lambda: len(tg.drafts) >= 1)
        await edited.update("first")
        await wait_until(lambda: len(tg.sent) >= 1)
        tg.fail_next("editMessageText", 400, refused, when=html)
        await edited.update("**second**")
        await wait_until(lambda: len(tg.edits) >= 1)
        tg.fail_next("editMessageText", 400, "Bad Request: message is not modified: same")
        [group_id] = await edited.finish(Outbound("telegram", str(GROUP), "third"))
        await draft.finish(Outbound("telegram", str(DM), "done"))
    assert [d.text for d in tg.drafts] == ["**so far**"]
    assert [e.text for e in tg.edits] == ["**second**"]  # "third": Telegram said not modified
    assert group_id == str(tg.bot_messages(GROUP)[0]["message_id"])
    assert [m["text"] for m in tg.sent] == ["first", "done"]


async def test_a_group_stream_that_shrinks_deletes_the_messages_it_no_longer_needs() -> None:
    preview = "\n\n".join(f"Draft paragraph {i}: " + "words " * 160 for i in range(10))
    assert len(split_message(preview, LIMIT, utf16_len)) == 3  # two and a half messages
    async with telegram() as (tg, adapter, got):
        asked = in_group(tg, "@soul_test_bot think out loud")
        await got.wait(1)
        stream = adapter.stream(Outbound("telegram", str(GROUP), "", reply_to=str(asked)))
        assert stream is not None
        await stream.update(preview)
        await wait_until(lambda: len(tg.sent) >= 3)
        ids = await stream.finish(Outbound("telegram", str(GROUP), "short", reply_to=str(asked)))
        left = tg.bot_messages(GROUP)
        posted = [c.result["message_id"] for c in tg.calls_of("sendMessage") if c.status == 200]
    assert len(posted) == 3 and [m["text"] for m in left] == ["short"]
    assert left[0]["message_id"] == posted[0]
    assert sorted(d.message_id for d in tg.deleted) == posted[1:]
    assert {d.chat_id for d in tg.deleted} == {GROUP}
    assert ids == [str(posted[0])]


async def test_a_group_preview_deleted_mid_answer_gives_way_to_a_new_message() -> None:
    final = "The whole answer, at last."
    async with telegram() as (tg, adapter, got):
        asked = in_group(tg, "@soul_test_bot tell me")
        await got.wait(1)
        stream = adapter.stream(Outbound("telegram", str(GROUP), "", reply_to=str(asked)))
        assert stream is not None
        await stream.update("The whole")
        await wait_until(lambda: len(tg.sent) >= 1)
        [preview] = tg.bot_messages(GROUP)
        tg.delete_message(GROUP, preview["message_id"])  # an admin, or Telegram's anti-spam
        await stream.update("The whole answer")
        ids = await stream.finish(Outbound("telegram", str(GROUP), final, reply_to=str(asked)))
        left = tg.bot_messages(GROUP)
        posted = [c for c in tg.calls_of("sendMessage") if c.status == 200]
    assert [m["text"] for m in left] == [final]
    assert ids == [str(left[0]["message_id"])] != [str(preview["message_id"])]
    assert posted[-1].params["reply_parameters"]["message_id"] == asked  # it still answers
