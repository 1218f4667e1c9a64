"""The Discord adapter's intake (every message, images, stickers, quotes) and its
replies (ids, streaming): the real adapter and discord.py against the REST +
gateway fake, with a `deliver` that collects what arrives (no runtime)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adapters.discord_adapter import LIMIT, DiscordAdapter
from adapters.retry import Backoff
from adapters.split import split_message
from bot.types import Outbound, Quote
from tests.fakes.discord_fake import FakeDiscord, FakeFile
from tests.kit import Inbox, delivering

GUILD, CHANNEL = 500, 510
ANN, BOB, CAT = 11, 12, 13
FAST = Backoff(first_s=0.01, max_s=0.02)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PACE_S = 0.95  # one second between shows, less what the loopback's latency may shift


@asynccontextmanager
async def started(**options: Any) -> AsyncIterator[tuple[FakeDiscord, DiscordAdapter, Inbox]]:
    async with FakeDiscord() as dc:
        dc.add_guild(GUILD, channels=[CHANNEL], members=[(ANN, "ann"), (BOB, "bob")])
        adapter = DiscordAdapter("TEST.DISCORD.TOKEN", commands=[("help", "Help")],
                                 api_base_url=dc.api_base_url, gateway_url=dc.gateway_url,
                                 guild_ready_timeout=0.05, backoff=FAST, **options)  # fmt: skip
        async with delivering(adapter) as inbox:
            yield dc, adapter, inbox


def say(dc: FakeDiscord, text: str, author: int = BOB, **extra: Any) -> int:
    """A guild message from `author` (bob) in the channel; its id."""
    name = {ANN: "ann", BOB: "bob", CAT: "cat"}[author]
    return dc.push_message(CHANNEL, text, author_id=author, author_name=name, guild_id=GUILD,
                           **extra)  # fmt: skip


def reply_to(message_id: int) -> Outbound:
    return Outbound("discord", str(CHANNEL), "", reply_to=str(message_id))


# -- what arrives ------------------------------------------------------------------------


async def test_an_unaddressed_guild_message_arrives_and_a_bots_comes_marked() -> None:
    # Another bot's message reaches the core marked `from_bot` (the router gates it:
    # bot/chat/bots.py); a person's is not.
    async with started() as (dc, _, inbox):
        dc.push_message(CHANNEL, "beep", author_id=99, guild_id=GUILD, author_bot=True)
        mid = say(dc, "talking among us")
        [bot, got] = await inbox.wait(2)
    assert bot.text == "beep" and bot.from_bot and not got.from_bot
    assert got.text == "talking among us" and got.message_id == str(mid)
    assert not got.mentions_bot and not got.reply_to_bot and not got.is_dm
    assert got.guild_id == str(GUILD) and got.user_name == "bob"
    assert got.images == () and not got.media
    assert got.quote is None and got.reply_to_id is None


async def test_an_image_arrives_as_media_that_fetches_its_bytes() -> None:
    async with started() as (dc, _, inbox):
        say(dc, "my cat", attachments=[FakeFile("cat.png", PNG, "image/png")])
        got = await inbox.one()
        assert dc.downloads == []  # not downloaded until the core asks
        [image] = got.images
        data = await image.fetch()
    assert (image.kind, image.mime, image.size) == ("image", "image/png", len(PNG))
    assert data == PNG and got.text == "my cat" and not got.media


async def test_an_image_without_a_media_type_is_known_by_its_name() -> None:
    async with started() as (dc, _, inbox):
        nameless = FakeFile("photo.JPG", b"\xff\xd8\xff", content_type=None)  # type: ignore[arg-type]
        say(dc, "", attachments=[nameless, FakeFile("song.mp3", b"ID3", content_type=None)])  # type: ignore[arg-type]
        got = await inbox.one()
    assert [(m.mime, m.size) for m in got.images] == [("image/jpeg", 3)]
    assert not got.media  # it carries an image: the mp3 beside it is not worth a line


async def test_every_image_arrives_with_its_declared_size_for_the_core_to_hold() -> None:
    async with started() as (dc, _, inbox):
        files = [FakeFile(f"p{i}.webp", PNG, "image/webp") for i in range(5)]
        huge = FakeFile("huge.png", PNG, "image/png", declared_size=4_000_000)
        say(dc, "album", attachments=[*files, huge])
        got = await inbox.one()
    assert [m.mime for m in got.images] == ["image/webp"] * 5 + ["image/png"]
    assert got.images[-1].size == 4_000_000 and dc.downloads == []


async def test_a_file_alone_is_media_and_with_text_is_not() -> None:
    async with started() as (dc, _, inbox):
        say(dc, "", attachments=[FakeFile("notes.pdf", b"%PDF-1.7", "application/pdf")])
        alone = await inbox.one()
        say(dc, "read this", attachments=[FakeFile("notes.pdf", b"%PDF-1.7", "application/pdf")])
        with_text = await inbox.one()
    assert alone.media and alone.text == "" and alone.images == ()
    assert not with_text.media and with_text.text == "read this"


async def test_a_sticker_is_its_name_in_the_text() -> None:
    async with started() as (dc, _, inbox):
        say(dc, "", stickers=["Wave"])
        alone = await inbox.one()
        say(dc, "hi all", stickers=["Wave", "Party Parrot"])
        with_text = await inbox.one()
    assert alone.text == "[sticker: Wave]" and not alone.media
    assert with_text.text == "hi all [sticker: Wave] [sticker: Party Parrot]"


async def test_a_reply_to_a_third_person_carries_the_quote() -> None:
    long_claim = ", ".join(["the sky is green"] * 60)  # whole: the core cuts it, not the adapter
    async with started() as (dc, _, inbox):
        claim = say(dc, long_claim, author=CAT)
        picture = say(dc, "", author=CAT, attachments=[FakeFile("a.png", PNG, "image/png")])
        await inbox.wait(2)
        say(dc, "it is not", reply_to=claim)
        to_text = await inbox.one()
        say(dc, "nice", reply_to=picture)
        to_image = await inbox.one()
    assert to_text.quote == Quote(user_name="cat", text=long_claim, from_bot=False)
    assert to_text.reply_to_id == str(claim) and not to_text.reply_to_bot
    assert to_image.quote == Quote(user_name="cat", text="[image]")


async def test_a_reply_to_the_bot_quotes_it_and_is_a_reply_to_the_bot() -> None:
    async with started() as (dc, adapter, inbox):
        asked = say(dc, "hello")
        await inbox.wait(1)
        [sent] = await adapter.send(
            Outbound("discord", str(CHANNEL), "hi bob", reply_to=str(asked))
        )
        say(dc, "and you?", reply_to=int(sent))
        got = await inbox.one()
    assert got.reply_to_bot and got.reply_to_id == sent
    assert got.quote == Quote(user_name="soul", text="hi bob", from_bot=True)


async def test_a_reply_to_a_deleted_message_has_its_id_and_no_quote() -> None:
    async with started() as (dc, _, inbox):
        gone = say(dc, "soon deleted", author=CAT)
        await inbox.wait(1)
        say(dc, "what did they say?", reply_to=gone, referenced=False)
        got = await inbox.one()
    assert got.reply_to_id == str(gone) and got.quote is None and not got.reply_to_bot


# -- replies -----------------------------------------------------------------------------


async def test_send_returns_the_ids_of_every_message_it_made() -> None:
    long = "\n\n".join(f"paragraph {i}: " + "words " * 60 for i in range(12))
    async with started() as (dc, adapter, inbox):
        asked = say(dc, "tell me everything")
        await inbox.wait(1)
        ids = await adapter.send(Outbound("discord", str(CHANNEL), long, reply_to=str(asked)))
        sent = dc.sent
    assert len(sent) == len(split_message(long, LIMIT)) > 1
    assert ids == [str(s.message_id) for s in sent]


async def test_a_slash_commands_answer_is_private_not_streamed_and_its_ids_come_back() -> None:
    async with started() as (dc, adapter, inbox):
        dc.push_interaction("help", [], user_id=ANN, channel_id=CHANNEL, guild_id=GUILD)
        asked = await inbox.one()
        answer = Outbound("discord", str(CHANNEL), "the help", reply_to=asked.message_id)
        assert adapter.stream(answer) is None
        ids = await adapter.send(answer)
        followups = [r for r in dc.interaction_replies if r.kind == "followup"]
    assert asked.message_id.startswith("interaction:") and len(ids) == 1 and ids[0].isdigit()
    assert [f.content for f in followups] == ["the help"] and dc.sent == []


async def test_streaming_off_gives_no_stream_and_notes_are_empty() -> None:
    async with started(streaming=False) as (dc, adapter, inbox):
        asked = say(dc, "hello")
        await inbox.wait(1)
        assert adapter.stream(reply_to(asked)) is None
        assert adapter.notes() == []


async def test_a_stream_posts_early_then_edits_at_most_once_a_second() -> None:
    final = "Once upon a time there was a bot that wrote slowly. The end."
    async with started() as (dc, adapter, inbox):
        asked = say(dc, "a story, please")
        await inbox.wait(1)
        stream = adapter.stream(reply_to(asked))
        assert stream is not None
        await stream.update("Once")
        [first] = await dc.wait_sent(1)  # posted at once, before the answer is done
        await stream.update("Once upon")
        await stream.update("Once upon a time")
        await dc.wait_for(lambda f: len(f.edits) >= 1, what="a preview edit")
        await stream.update("Once upon a time there was")
        ids = await stream.finish(Outbound("discord", str(CHANNEL), final, reply_to=str(asked)))
        posts = [r for r in dc.requests if r.method == "POST" and r.path.endswith("/messages")]
        posted_at = posts[0].t
        edits = dc.edits
        text = dc.message_text(first.message_id)
    assert first.content == "Once" and first.reply_to == asked
    assert first.body["allowed_mentions"]["parse"] == []
    assert len(dc.sent) == 1 and ids == [str(first.message_id)]
    assert edits[0].content == "Once upon a time" and edits[-1].content == final == text
    times = [posted_at, *(e.at for e in edits)]
    assert all(later - earlier >= PACE_S for earlier, later in itertools.pairwise(times))
    assert all(e.body["allowed_mentions"]["parse"] == [] for e in edits)


async def test_a_long_stream_is_split_at_2000_with_fences_closed_in_every_message() -> None:
    code = "\n".join(f"value_{i} = compute({i}, {i * 7})  # step {i}" for i in range(120))
    final = f"Here it is:\n\n```python\n{code}\n```\n\nThat is all."
    async with started() as (dc, adapter, inbox):
        asked = say(dc, "the code, please")
        await inbox.wait(1)
        stream = adapter.stream(reply_to(asked))
        assert stream is not None
        await stream.update(final[:1500])  # inside the fence
        await dc.wait_sent(1)
        await stream.update(final[:3000])  # two messages now
        await dc.wait_sent(2)
        ids = await stream.finish(Outbound("discord", str(CHANNEL), final, reply_to=str(asked)))
        sent, edits = dc.sent, dc.edits
        shown = [dc.message_text(s.message_id) for s in sent]
    chunks = split_message(final, LIMIT)
    assert len(chunks) == 3 and shown == chunks and ids == [str(s.message_id) for s in sent]
    texts = [s.content for s in sent] + [e.content for e in edits]
    assert all(len(t) <= LIMIT and t.count("```") % 2 == 0 for t in texts)
    assert sent[0].reply_to == asked and sent[1].reply_to is None


async def test_a_stream_that_shrinks_deletes_the_messages_it_no_longer_needs() -> None:
    preview = "\n\n".join(f"draft paragraph {i}: " + "words " * 80 for i in range(10))
    assert len(split_message(preview, LIMIT)) == 3  # two and a half messages' worth
    async with started() as (dc, adapter, inbox):
        asked = say(dc, "think out loud")
        await inbox.wait(1)
        stream = adapter.stream(reply_to(asked))
        assert stream is not None
        await stream.update(preview)
        posted = [s.message_id for s in await dc.wait_sent(3)]
        ids = await stream.finish(Outbound("discord", str(CHANNEL), "short", reply_to=str(asked)))
        deleted = dc.deleted
        kept = [m for m in posted if m not in {d.message_id for d in deleted}]
        shown = [dc.message_text(m) for m in kept]
        for gone in posted[1:]:
            with pytest.raises(ValueError, match="was deleted"):
                dc.message_text(gone)
    assert len(dc.sent) == 3 and kept == posted[:1] and shown == ["short"]
    assert sorted(d.message_id for d in deleted) == sorted(posted[1:])
    assert {d.channel_id for d in deleted} == {CHANNEL}
    assert ids == [str(posted[0])]
