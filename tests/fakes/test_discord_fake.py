"""The Discord fake, driven by the real discord.py client over loopback."""

from __future__ import annotations

import asyncio
import io
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import discord
import pytest
import yarl
from discord import app_commands

from tests.fakes.audio import tone_ogg_opus
from tests.fakes.discord_fake import FakeDiscord, FakeFile, guild_id_on_shard
from tests.fakes.images import jpeg, png

TOKEN = "TEST.DISCORD.TOKEN"
BOT = 7000
GUILD, CHANNEL, THREAD = 100, 101, 102
ANN, BEA = 501, 502
DM = 900

pytestmark = pytest.mark.timeout(30)


class Bot(discord.Client):
    """A client that queues what it receives, for tests to await."""

    def __init__(self, *, message_content: bool = True) -> None:
        intents = discord.Intents.default()
        intents.message_content = message_content
        super().__init__(intents=intents, guild_ready_timeout=0.05)
        self.tree = app_commands.CommandTree(self)
        self.ready = asyncio.Event()
        self.inbox: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.joined: asyncio.Queue[discord.Guild] = asyncio.Queue()

    async def on_ready(self) -> None:
        self.ready.set()

    async def on_message(self, message: discord.Message) -> None:
        await self.inbox.put(message)

    async def on_guild_join(self, guild: discord.Guild) -> None:
        await self.joined.put(guild)

    async def next_message(self) -> discord.Message:
        return await asyncio.wait_for(self.inbox.get(), 5)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """A started fake with one guild (a channel, a thread), discord.py pointed at it."""
    async with FakeDiscord(token=TOKEN, bot_id=BOT, app_id=BOT) as f:
        f.add_guild(GUILD, "Home", channels=[CHANNEL], members=[(ANN, "ann")])
        f.add_thread(THREAD, CHANNEL, GUILD, name="plans")
        monkeypatch.setattr(discord.http.Route, "BASE", f.api_base_url)
        monkeypatch.setattr(
            discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(f.gateway_url)
        )
        yield f


async def run_bot(bot: Bot) -> asyncio.Task[None]:
    task = asyncio.create_task(bot.start(TOKEN), name="test-discord-client")
    ready = asyncio.create_task(bot.ready.wait())
    await asyncio.wait({task, ready}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        ready.cancel()
        task.cancel()
        raise AssertionError(f"on_ready did not fire: {task}")
    return task


@pytest.fixture
async def bot(fake: FakeDiscord) -> AsyncIterator[Bot]:
    """A connected, ready client; closed after the test."""
    client = Bot()
    task = await run_bot(client)
    yield client
    await client.close()
    await asyncio.wait_for(task, 5)


async def test_ready_carries_user_guild_channels_and_thread(fake: FakeDiscord, bot: Bot) -> None:
    assert bot.user is not None and bot.user.id == BOT and bot.user.bot
    assert bot.application_id == BOT
    guild = bot.get_guild(GUILD)
    assert guild is not None and guild.name == "Home" and guild.me is not None
    assert isinstance(guild.get_channel(CHANNEL), discord.TextChannel)
    assert guild.get_thread(THREAD) is not None
    assert fake.identify_count == 1 and fake.connected
    assert [r.path for r in fake.requests[:2]] == ["/users/@me", "/oauth2/applications/@me"]


async def test_dm_message_and_reply_in_the_dm(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(DM, "hello soul", author_id=BEA, author_name="bea")
    message = await bot.next_message()
    assert message.content == "hello soul" and message.guild is None
    assert isinstance(message.channel, discord.DMChannel) and message.channel.id == DM
    assert message.channel.recipient is None  # discord.py 2.7 does not resolve it
    assert message.author.id == BEA and message.author.name == "bea"
    reply = await message.channel.send("hi bea")
    assert reply.author.id == BOT
    [sent] = await fake.wait_sent(1)
    assert (sent.channel_id, sent.content, sent.message_id) == (DM, "hi bea", reply.id)


async def test_a_wait_sees_every_change_until_its_deadline(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(DM, "one", author_id=BEA, author_name="bea")
    fake.push_message(DM, "two", author_id=BEA, author_name="bea")
    channel = (await bot.next_message()).channel
    waiting = asyncio.create_task(fake.wait_sent(2, timeout=5))
    await channel.send("first")
    assert not waiting.done()  # one change is not the one it waits for
    await channel.send("second")
    assert [s.content for s in await waiting] == ["first", "second"]
    with pytest.raises(TimeoutError, match=r"gave up waiting for 3 sent messages after 0\.1s"):
        await fake.wait_sent(3, timeout=0.1)


async def test_slow_answers_keep_requests_in_flight_each_on_its_connection(
    fake: FakeDiscord, bot: Bot
) -> None:
    channel, thread = bot.get_channel(CHANNEL), bot.get_channel(THREAD)
    assert isinstance(channel, discord.TextChannel) and isinstance(thread, discord.Thread)
    fake.slow_answers(0.5)
    together = [asyncio.create_task(channel.send("one")), asyncio.create_task(thread.send("two"))]
    await fake.wait_for(lambda f: len(f.sent) == 2, what="both sends")
    assert not any(t.done() for t in together)  # both arrived, neither answered yet
    await asyncio.gather(*together)
    fake.slow_answers(0)
    await channel.send("three")
    await channel.send("four")
    ports = [r.port for r in fake.requests if r.path.endswith("/messages")]
    assert len(ports) == 4 and all(ports)
    assert ports[0] != ports[1]  # in flight together: two connections
    assert set(ports[2:]) <= set(ports[:2])  # one after the other: connections kept alive


async def test_user_send_finds_the_same_dm_channel(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(DM, "hello", author_id=BEA, author_name="bea")
    message = await bot.next_message()
    await message.author.send("via the user")
    [sent] = fake.sent
    assert sent.channel_id == DM
    assert [r.path for r in fake.requests][-2:] == [
        "/users/@me/channels",
        f"/channels/{DM}/messages",
    ]


async def test_guild_mention_reply_and_typing(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(CHANNEL, f"<@{BOT}> hi", author_id=ANN, guild_id=GUILD, mention_bot=True)
    message = await bot.next_message()
    assert bot.user in message.mentions
    assert isinstance(message.author, discord.Member) and message.guild is not None
    async with message.channel.typing():
        reply = await message.reply("hello ann")
    assert fake.typing == [CHANNEL]
    assert reply.type is discord.MessageType.reply
    assert reply.reference is not None and reply.reference.message_id == message.id
    [sent] = fake.sent
    assert sent.reply_to == message.id and sent.channel_id == CHANNEL

    fake.push_message(CHANNEL, "and?", author_id=ANN, guild_id=GUILD, reply_to=reply.id)
    answer = await bot.next_message()
    assert answer.type is discord.MessageType.reply
    assert answer.reference is not None and answer.reference.message_id == reply.id
    assert isinstance(answer.reference.resolved, discord.Message)
    assert answer.reference.resolved.author.id == BOT


async def test_thread_message_has_its_thread_and_parent(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(THREAD, "in the thread", author_id=ANN, guild_id=GUILD)
    message = await bot.next_message()
    assert isinstance(message.channel, discord.Thread)
    assert message.channel.id == THREAD and message.channel.parent_id == CHANNEL
    await message.channel.send("thread reply")
    assert fake.sent[0].channel_id == THREAD


async def test_guild_and_thread_added_after_connect(fake: FakeDiscord, bot: Bot) -> None:
    fake.add_guild(200, "Later", channels=[201])
    guild = await asyncio.wait_for(bot.joined.get(), 5)
    assert guild.id == 200 and guild.name == "Later"
    fake.add_thread(202, 201, 200)
    fake.push_message(202, "new thread", author_id=ANN, guild_id=200)
    message = await bot.next_message()
    assert isinstance(message.channel, discord.Thread) and message.channel.parent_id == 201


async def test_message_content_intent_is_honoured(fake: FakeDiscord) -> None:
    client = Bot(message_content=False)
    task = await run_bot(client)
    try:
        fake.push_message(CHANNEL, "secret", author_id=ANN, guild_id=GUILD)
        fake.push_message(
            CHANNEL, f"<@{BOT}> to you", author_id=ANN, guild_id=GUILD, mention_bot=True
        )
        fake.push_message(DM, "dm text", author_id=ANN)
        contents = [(await client.next_message()).content for _ in range(3)]
        assert contents == ["", f"<@{BOT}> to you", "dm text"]
    finally:
        await client.close()
        await asyncio.wait_for(task, 5)


async def test_events_pushed_before_connect_arrive_after_ready(fake: FakeDiscord) -> None:
    early = fake.push_message(DM, "early", author_id=ANN)
    client = Bot()
    task = await run_bot(client)
    try:
        message = await client.next_message()
        assert (message.id, message.content) == (early, "early")
        await message.channel.send("with a file", file=discord.File(io.BytesIO(b"x"), "a.txt"))
        assert fake.requests[-1].files == ("a.txt",)
        assert fake.sent[0].body["attachments"][0]["filename"] == "a.txt"
    finally:
        await client.close()
        await asyncio.wait_for(task, 5)


async def test_dropped_connection_resumes_and_delivers_once(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(DM, "before", author_id=ANN)
    assert (await bot.next_message()).content == "before"
    fake.drop_connection()
    assert not fake.connected
    fake.push_message(DM, "while down", author_id=ANN)
    assert (await bot.next_message()).content == "while down"
    await fake.wait_connected()
    assert (fake.resume_count, fake.identify_count) == (1, 1)
    fake.push_message(DM, "after", author_id=ANN)
    assert (await bot.next_message()).content == "after"  # not a second "while down"
    assert bot.inbox.empty()


async def test_same_message_id_can_be_pushed_twice(fake: FakeDiscord, bot: Bot) -> None:
    first = fake.push_message(DM, "dup", author_id=ANN)
    assert fake.push_message(DM, "dup", author_id=ANN, message_id=first) == first
    assert [(await bot.next_message()).id for _ in range(2)] == [first, first]


async def test_unknown_session_is_invalidated_and_client_identifies_again(
    fake: FakeDiscord, bot: Bot
) -> None:
    fake.invalidate_session()
    with pytest.raises(RuntimeError):
        fake.drop_connection()
    await fake.wait_for(lambda f: f.identify_count == 2, what="a second IDENTIFY")
    await fake.wait_connected()
    fake.push_message(DM, "fresh session", author_id=ANN)
    assert (await bot.next_message()).content == "fresh session"
    assert fake.resume_count == 0


async def test_wrong_token_is_login_failure(fake: FakeDiscord) -> None:
    client = discord.Client(intents=discord.Intents.default())
    try:
        with pytest.raises(discord.LoginFailure):
            await client.login("WRONG.TOKEN")
    finally:
        await client.close()
    assert fake.requests[-1].path == "/users/@me"


async def test_scripted_failures(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(CHANNEL)
    assert isinstance(channel, discord.TextChannel)
    fake.fail_next("POST", rf"/channels/{CHANNEL}/messages", 403)
    with pytest.raises(discord.Forbidden) as forbidden:
        await channel.send("nope")
    assert forbidden.value.code == 50013

    fake.fail_next("POST", r"/messages$", 429, {"retry_after": 0.01})
    await channel.send("after a rate limit")
    posts = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/messages")]
    assert len(posts) == 3 and [s.content for s in fake.sent] == ["after a rate limit"]

    with pytest.raises(discord.HTTPException) as too_long:
        await channel.send("x" * 2001)
    assert too_long.value.code == 50035
    with pytest.raises(discord.NotFound):
        await bot.http.send_message(999, params=discord.http.handle_message_parameters("x"))
    assert len(fake.sent) == 1


async def test_hang_ups_a_503_and_the_nonce(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(CHANNEL)
    assert isinstance(channel, discord.TextChannel)
    fake.fail_next("POST", r"/messages$", 503)
    with pytest.raises(discord.DiscordServerError) as unavailable:
        await channel.send("a 503 is not retried by discord.py")
    assert unavailable.value.status == 503
    fake.drop_next("POST", r"/messages$")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await channel.send("lost on the way")
    fake.drop_next("POST", r"/messages$", after=True)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await channel.send("made, answer lost", nonce=4711)
    again = await channel.send("made, answer lost", nonce=4711)  # enforce_nonce: the same one
    other = await channel.send("made, answer lost", nonce=4712)
    posts = [r for r in fake.requests if r.path.endswith("/messages")]
    assert len(posts) == 5 and fake.dropped == posts[1:3]
    assert [s.content for s in fake.sent] == ["made, answer lost"] * 2
    assert again.id == fake.sent[0].message_id != other.id
    assert again.nonce == "4711"


Handler = Callable[[discord.Interaction, str | None], Awaitable[None]]


def soul_group(handler: Handler) -> app_commands.Group:
    group = app_commands.Group(name="soul", description="soul admin")

    @group.command(name="reload", description="reload the soul")
    @app_commands.describe(what="what to reload")
    async def reload(interaction: discord.Interaction, what: str | None = None) -> None:
        await handler(interaction, what)

    return group


async def test_app_command_sync_and_send_message(fake: FakeDiscord, bot: Bot) -> None:
    seen: list[Any] = []

    async def handler(interaction: discord.Interaction, what: str | None) -> None:
        seen.append((interaction.user.id, interaction.guild_id, what))
        await interaction.response.send_message(f"ok {what}")

    bot.tree.add_command(soul_group(handler))
    synced = await bot.tree.sync()
    assert [c.name for c in synced] == ["soul"]
    [registered] = fake.commands[None]
    assert registered["options"][0]["name"] == "reload" and registered["id"] == str(synced[0].id)

    token = fake.push_interaction(
        "soul reload",
        [{"type": 3, "name": "what", "value": "wiki"}],
        user_id=ANN,
        channel_id=CHANNEL,
        guild_id=GUILD,
    )
    await fake.wait_for(lambda f: len(f.interaction_replies) == 1, what="the callback")
    [reply] = fake.interaction_replies
    assert (reply.kind, reply.token, reply.response_type, reply.content) == (
        "callback",
        token,
        4,
        "ok wiki",
    )
    assert seen == [(ANN, GUILD, "wiki")]


async def test_app_command_defer_followup_edit_in_dm(fake: FakeDiscord, bot: Bot) -> None:
    done = asyncio.Event()

    async def handler(interaction: discord.Interaction, what: str | None) -> None:
        await interaction.response.defer(thinking=True)
        followup = await interaction.followup.send("working", wait=True)
        assert followup.content == "working"
        await interaction.edit_original_response(content=f"done {what}")
        assert isinstance(interaction.channel, discord.DMChannel)
        done.set()

    bot.tree.add_command(soul_group(handler))
    await bot.tree.sync()
    token = fake.push_interaction("soul reload", [], user_id=BEA, channel_id=DM)
    await asyncio.wait_for(done.wait(), 5)
    kinds = [(r.kind, r.token, r.content) for r in fake.interaction_replies]
    assert kinds == [
        ("callback", token, None),
        ("followup", token, "working"),
        ("edit", token, "done None"),
    ]
    assert fake.interaction_replies[0].response_type == 5


async def test_an_ephemeral_followup_is_recorded_and_an_old_token_is_refused(
    fake: FakeDiscord, bot: Bot
) -> None:
    outcomes: list[tuple[bool, str]] = []
    done = asyncio.Event()

    async def handler(interaction: discord.Interaction, what: str | None) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        try:
            await interaction.followup.send(f"only you see {what}", ephemeral=True)
            outcomes.append((interaction.is_expired(), "sent"))
        except discord.HTTPException as exc:
            outcomes.append((interaction.is_expired(), f"{exc.status} {exc.code}"))
        done.set()

    bot.tree.add_command(soul_group(handler))
    await bot.tree.sync()
    fresh = fake.push_interaction("soul reload", [{"type": 3, "name": "what", "value": "x"}],
                                  user_id=ANN, channel_id=CHANNEL, guild_id=GUILD)  # fmt: skip
    await asyncio.wait_for(done.wait(), 5)
    done.clear()
    fake.push_interaction("soul reload", [], user_id=ANN, channel_id=CHANNEL, guild_id=GUILD,
                          age_s=15 * 60 + 1)  # fmt: skip
    await asyncio.wait_for(done.wait(), 5)
    assert outcomes == [(False, "sent"), (True, "401 50027")]
    [followup] = [r for r in fake.interaction_replies if r.kind == "followup"]
    assert followup.token == fresh and followup.content == "only you see x"
    assert followup.data["flags"] & 64  # ephemeral
    assert fake.sent == []


async def test_a_multipart_message_records_its_files(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_partial_messageable(CHANNEL)
    files = [
        discord.File(io.BytesIO(b"# Notes\n"), "notes.md"),
        discord.File(io.BytesIO(b"x"), "b"),
    ]
    message = await channel.send("two files", files=files)
    [sent] = fake.sent
    assert [(f.part, f.filename, f.data) for f in sent.files] == [
        ("files[0]", "notes.md", b"# Notes\n"),
        ("files[1]", "b", b"x"),
    ]
    assert [(a.filename, a.size) for a in message.attachments] == [("notes.md", 8), ("b", 1)]
    assert fake.requests[-1].uploads == sent.files
    alone = await channel.send(file=discord.File(io.BytesIO(b"only"), "only.md"))
    assert alone.content == "" and [a.filename for a in alone.attachments] == ["only.md"]
    fake.max_upload_bytes = 3
    with pytest.raises(discord.HTTPException) as caught:
        await channel.send(file=discord.File(io.BytesIO(b"four"), "big.md"))
    assert (caught.value.status, caught.value.code) == (413, 40005)
    assert len(fake.sent) == 2


async def test_an_uploaded_image_is_typed_and_measured_as_discord_does(
    fake: FakeDiscord, bot: Bot
) -> None:
    channel = bot.get_partial_messageable(CHANNEL)
    files = [
        discord.File(io.BytesIO(png(800, 500)), "usage.png"),
        discord.File(io.BytesIO(jpeg(64, 48)), "photo"),
        discord.File(io.BytesIO(b"# Notes\n"), "notes.md"),
    ]
    message = await channel.send("a chart", files=files)
    shown = [(a.filename, a.content_type, a.width, a.height) for a in message.attachments]
    assert shown[:2] == [("usage.png", "image/png", 800, 500), ("photo", "image/jpeg", 64, 48)]
    assert shown[2][2:] == (None, None) and shown[2][1] != "image/png"
    fetched = await message.attachments[0].read()
    assert fetched == png(800, 500)


async def test_a_followup_records_its_file(fake: FakeDiscord, bot: Bot) -> None:
    done = asyncio.Event()

    async def handler(interaction: discord.Interaction, what: str | None) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await interaction.followup.send(
            "yours", ephemeral=True, file=discord.File(io.BytesIO(b"data"), "memory.md")
        )
        done.set()

    bot.tree.add_command(soul_group(handler))
    await bot.tree.sync()
    fake.push_interaction("soul reload", [], user_id=BEA, channel_id=DM)
    await asyncio.wait_for(done.wait(), 5)
    [followup] = [r for r in fake.interaction_replies if r.kind == "followup"]
    assert followup.content == "yours" and followup.data["flags"] & 64
    assert [(f.filename, f.data) for f in followup.files] == [("memory.md", b"data")]


async def test_pushed_attachments_are_served_over_http(fake: FakeDiscord, bot: Bot) -> None:
    png = FakeFile("cat pic.png", b"\x89PNG fake", "image/png", width=4, height=3)
    liar = FakeFile("huge.txt", b"small", "text/plain; charset=utf-8", declared_size=50_000_000)
    fake.push_message(DM, "look", author_id=ANN, attachments=[png, liar])
    message = await bot.next_message()
    image, text = message.attachments
    assert (image.filename, image.size, image.content_type) == ("cat pic.png", 9, "image/png")
    assert (image.width, image.height, text.width) == (4, 3, None)
    origin = fake.api_base_url.removesuffix("/api/v10")
    assert image.url == f"{origin}/attachments/{DM}/{image.id}/cat%20pic.png" == image.proxy_url
    assert (text.size, text.content_type) == (50_000_000, "text/plain; charset=utf-8")
    assert await image.read() == b"\x89PNG fake"
    assert await text.read(use_cached=True) == b"small"  # proxy_url: the same route
    with pytest.raises(discord.NotFound):
        await bot.http.get_from_cdn(image.url.replace(str(image.id), str(text.id)))
    assert [(d.attachment_id, d.found) for d in fake.downloads] == [
        (image.id, True),
        (text.id, True),
        (text.id, False),
    ]
    small = FakeFile("a.bin", b"0123456789", declared_size=1)
    fake.push_message(CHANNEL, "", author_id=ANN, guild_id=GUILD, attachments=[small])
    [tiny] = (await bot.next_message()).attachments
    assert (tiny.size, tiny.content_type) == (1, "application/octet-stream")
    assert await tiny.read() == b"0123456789"


async def test_a_voice_message_comes_as_discord_sends_one(fake: FakeDiscord, bot: Bot) -> None:
    note = tone_ogg_opus(1.5)
    fake.push_voice_message(DM, note, author_id=ANN)
    message = await bot.next_message()
    [recording] = message.attachments
    assert message.flags.voice and message.flags.value == 1 << 13 and message.content == ""
    assert recording.is_voice_message() and recording.content_type == "audio/ogg"
    assert recording.duration == pytest.approx(1.5, abs=0.05) and recording.size == len(note)
    assert recording.waveform is not None and len(recording.waveform) == 256
    assert await recording.read() == note
    song = FakeFile("sea shanty.ogg", tone_ogg_opus(0.5), "audio/ogg")
    fake.push_message(CHANNEL, "hear this", author_id=ANN, guild_id=GUILD, attachments=[song])
    audio = await bot.next_message()
    assert not audio.flags.voice and not audio.attachments[0].is_voice_message()
    assert audio.attachments[0].duration is None
    assert await audio.attachments[0].read() == song.data


async def test_the_bots_own_uploads_are_served_too(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_partial_messageable(CHANNEL)
    sent = await channel.send(file=discord.File(io.BytesIO(b"# mine"), "mine.md"))
    [attachment] = sent.attachments
    assert await attachment.read() == b"# mine"
    assert fake.downloads[-1].channel_id == CHANNEL and fake.downloads[-1].found


async def test_a_hung_download_runs_into_the_clients_timeout(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(DM, "slow", author_id=ANN, attachments=[FakeFile("a.txt", b"abc")])
    [attachment] = (await bot.next_message()).attachments
    fake.hang_downloads(30)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(attachment.read(), 0.2)
    [download] = fake.downloads
    assert download.found and download.filename == "a.txt"
    fake.hang_downloads(0)
    assert await asyncio.wait_for(attachment.read(), 5) == b"abc"
    assert len(fake.downloads) == 2


async def test_stickers_arrive_as_sticker_items(fake: FakeDiscord, bot: Bot) -> None:
    fake.push_message(CHANNEL, "", author_id=ANN, guild_id=GUILD, stickers=["wave", "cat"])
    message = await bot.next_message()
    assert [s.name for s in message.stickers] == ["wave", "cat"]
    assert {s.format for s in message.stickers} == {discord.StickerFormatType.png}
    assert message.content == "" and message.attachments == []


async def test_the_bot_edits_its_messages(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(CHANNEL)
    assert isinstance(channel, discord.TextChannel)
    message = await channel.send("draft")
    assert message.edited_at is None
    edited = await message.edit(content="final")
    assert edited.content == "final" and edited.edited_at is not None
    again = await channel.get_partial_message(message.id).edit(content="final, really")
    assert again.content == "final, really"
    [first, second] = fake.edits
    assert (first.channel_id, first.message_id, first.content) == (CHANNEL, message.id, "final")
    assert second.content == "final, really" and first.at <= second.at
    assert second.body["content"] == "final, really"
    assert fake.message_text(message.id) == "final, really"
    assert fake.sent[0].content == "draft"  # Sent keeps what was sent
    with pytest.raises(discord.HTTPException) as emptied:
        await message.edit(content=None)
    assert emptied.value.code == 50006
    file = discord.File(io.BytesIO(b"x"), "x.txt")
    with_file = await channel.send("caption", file=file)
    assert (await with_file.edit(content=None)).content == ""  # the file stays

    theirs = fake.push_message(CHANNEL, "mine", author_id=ANN, guild_id=GUILD)
    await bot.next_message()
    with pytest.raises(discord.Forbidden) as forbidden:
        await channel.get_partial_message(theirs).edit(content="hacked")
    assert forbidden.value.code == 50005 and fake.message_text(theirs) == "mine"
    with pytest.raises(discord.HTTPException) as too_long:
        await message.edit(content="x" * 2001)
    assert (too_long.value.status, too_long.value.code) == (400, 50035)
    with pytest.raises(discord.NotFound) as unknown:
        await channel.get_partial_message(12345).edit(content="?")
    assert unknown.value.code == 10008
    with pytest.raises(ValueError, match="unknown message"):
        fake.message_text(12345)
    assert len(fake.edits) == 3


async def test_edits_meet_scripted_failures_and_hang_ups(fake: FakeDiscord, bot: Bot) -> None:
    message = await bot.get_partial_messageable(CHANNEL).send("v1")
    fake.fail_next("PATCH", rf"^/channels/{CHANNEL}/messages/\d+$", 403)
    with pytest.raises(discord.Forbidden):
        await message.edit(content="v2")
    fake.fail_next("PATCH", r"/messages/", 429, {"retry_after": 0.01})
    await message.edit(content="v3")
    fake.drop_next("PATCH", r"/messages/", after=True)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await message.edit(content="v4")
    patches = [r for r in fake.requests if r.method == "PATCH"]
    assert len(patches) == 4 and fake.dropped == patches[3:]
    assert [e.content for e in fake.edits] == ["v3", "v4"]
    assert fake.message_text(message.id) == "v4"  # made, only the answer was lost


async def test_the_bot_deletes_its_messages_and_no_one_elses(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(CHANNEL)
    assert isinstance(channel, discord.TextChannel)
    first, second = await channel.send("preview 1"), await channel.send("preview 2")
    await first.delete()  # Message.delete()
    await channel.get_partial_message(second.id).delete()  # PartialMessage.delete()
    [a, b] = fake.deleted
    assert (a.channel_id, a.message_id, b.message_id) == (CHANNEL, first.id, second.id)
    assert a.at <= b.at
    with pytest.raises(ValueError, match=f"message {first.id} was deleted"):
        fake.message_text(first.id)
    assert [s.content for s in fake.sent] == ["preview 1", "preview 2"]  # as sent

    with pytest.raises(discord.NotFound) as again:  # gone for every route
        await first.delete()
    assert again.value.code == 10008
    with pytest.raises(discord.NotFound) as edited:
        await first.edit(content="back?")
    assert edited.value.code == 10008
    with pytest.raises(discord.NotFound) as fetched:
        await channel.fetch_message(first.id)
    assert fetched.value.code == 10008
    with pytest.raises(discord.HTTPException) as replied:
        await channel.send("to it", reference=first)
    assert (replied.value.status, replied.value.code) == (400, 50035)

    kept = await channel.send("kept")
    with pytest.raises(discord.NotFound) as elsewhere:  # the id, in another channel
        await bot.get_partial_messageable(THREAD).get_partial_message(kept.id).delete()
    assert elsewhere.value.code == 10008
    with pytest.raises(discord.NotFound) as no_channel:
        await bot.get_partial_messageable(4242).get_partial_message(kept.id).delete()
    assert no_channel.value.code == 10003
    theirs = fake.push_message(CHANNEL, "mine", author_id=ANN, guild_id=GUILD)
    await bot.next_message()
    with pytest.raises(discord.Forbidden) as forbidden:  # no Manage Messages
        await channel.get_partial_message(theirs).delete()
    assert (forbidden.value.code, forbidden.value.text) == (50013, "Missing Permissions")
    fake.push_message(DM, "private", author_id=BEA, author_name="bea")
    in_dm = await bot.next_message()
    with pytest.raises(discord.Forbidden) as dm:
        await in_dm.delete()
    assert dm.value.code == 50003
    assert fake.message_text(kept.id) == "kept" and fake.message_text(theirs) == "mine"
    assert len(fake.deleted) == 2
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert [r.path for r in deletes[:2]] == [
        f"/channels/{CHANNEL}/messages/{first.id}",
        f"/channels/{CHANNEL}/messages/{second.id}",
    ]
    assert len(deletes) == 7


async def test_a_moderator_deletes_a_message_mid_stream(fake: FakeDiscord, bot: Bot) -> None:
    channel = bot.get_channel(CHANNEL)
    assert isinstance(channel, discord.TextChannel)
    preview = await channel.send("half an answer")
    deleted: asyncio.Queue[discord.RawMessageDeleteEvent] = asyncio.Queue()

    @bot.event
    async def on_raw_message_delete(event: discord.RawMessageDeleteEvent) -> None:
        await deleted.put(event)

    fake.delete_message(CHANNEL, preview.id)
    event = await asyncio.wait_for(deleted.get(), 5)  # Discord tells the bot, as it does
    assert (event.message_id, event.channel_id, event.guild_id) == (preview.id, CHANNEL, GUILD)
    with pytest.raises(discord.NotFound) as edited:
        await preview.edit(content="the whole answer")
    assert edited.value.code == 10008 and edited.value.text == "Unknown Message"
    with pytest.raises(ValueError, match=f"message {preview.id} was deleted"):
        fake.message_text(preview.id)
    assert [(d.channel_id, d.message_id) for d in fake.deleted] == [(CHANNEL, preview.id)]
    with pytest.raises(ValueError, match="no message"):
        fake.delete_message(CHANNEL, preview.id)


async def test_deletes_meet_scripted_failures_and_aiohttps_own_retry(
    fake: FakeDiscord, bot: Bot
) -> None:
    channel = bot.get_partial_messageable(CHANNEL)
    first, second, third = [await channel.send(f"v{n}") for n in (1, 2, 3)]
    fake.fail_next("DELETE", r"/messages/", 429, {"retry_after": 0.01})
    await first.delete()  # discord.py sleeps and retries
    # aiohttp sends an idempotent request once more after a hang-up, by itself:
    fake.drop_next("DELETE", r"/messages/", after=True)
    with pytest.raises(discord.NotFound) as lost:  # deleted; the retry finds it gone
        await second.delete()
    assert lost.value.code == 10008
    fake.drop_next("DELETE", r"/messages/", times=2)  # before the route: nothing deleted
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await third.delete()
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert len(deletes) == 6 and fake.dropped == [deletes[2], deletes[4], deletes[5]]
    assert [d.message_id for d in fake.deleted] == [first.id, second.id]
    assert fake.message_text(third.id) == "v3"


async def test_replies_to_a_users_message_and_to_a_missing_one(fake: FakeDiscord, bot: Bot) -> None:
    asked = fake.push_message(CHANNEL, "question", author_id=ANN, guild_id=GUILD)
    await bot.next_message()
    fake.push_message(CHANNEL, "+1", author_id=BEA, author_name="bea", guild_id=GUILD,
                      reply_to=asked)  # fmt: skip
    reply = await bot.next_message()
    assert reply.reference is not None and reply.reference.message_id == asked
    resolved = reply.reference.resolved
    assert isinstance(resolved, discord.Message)
    assert (resolved.author.id, resolved.content) == (ANN, "question")

    fake.push_message(CHANNEL, "what was it?", author_id=BEA, guild_id=GUILD, reply_to=asked,
                      referenced=False)  # fmt: skip
    orphan = await bot.next_message()
    assert orphan.type is discord.MessageType.reply
    assert orphan.reference is not None and orphan.reference.message_id == asked
    gone = orphan.reference.resolved
    assert isinstance(gone, discord.DeletedReferencedMessage)
    assert (gone.id, gone.channel_id, gone.guild_id) == (asked, CHANNEL, GUILD)


# -- shards, over bare websockets: which connection an event comes on --------------------------

INTENTS = (1 << 9) | (1 << 12) | (1 << 15)  # guild messages, direct messages, message content


class RawGateway:
    """One gateway connection over a bare websocket (discord.py merges its shards'
    events, so only this shows which connection got which)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def frame(self) -> dict[str, Any]:
        """The next frame, of any op; fails on a close or after 5 s."""
        msg = await asyncio.wait_for(self.ws.receive(), 5)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        frame: dict[str, Any] = json.loads(msg.data)
        return frame

    async def event(self) -> tuple[str, dict[str, Any]]:
        """The next dispatch (op 0), past heartbeat answers: its type and data."""
        while (frame := await self.frame())["op"] != 0:
            pass
        return frame["t"], frame["d"]

    async def identify(self, shard: list[int] | None, intents: int = INTENTS) -> None:
        payload: dict[str, Any] = {"token": TOKEN, "intents": intents, "properties": {}}
        if shard is not None:
            payload["shard"] = shard
        await self.ws.send_json({"op": 2, "d": payload})

    async def ready(self, shard: list[int] | None) -> dict[str, Any]:
        """IDENTIFY and return the READY."""
        await self.identify(shard)
        t, d = await self.event()
        assert t == "READY"
        return d

    async def closed_with(self) -> int:
        """The code of the close frame that comes next."""
        msg = await asyncio.wait_for(self.ws.receive(), 5)
        assert msg.type is aiohttp.WSMsgType.CLOSE, msg
        return int(msg.data)


@pytest.fixture
async def connect() -> AsyncIterator[Callable[[FakeDiscord], Awaitable[RawGateway]]]:
    """Open a bare gateway connection to a fake (past its HELLO); all closed after."""
    async with aiohttp.ClientSession() as session:

        async def open_one(fake: FakeDiscord) -> RawGateway:
            gateway = RawGateway(await session.ws_connect(fake.gateway_url))
            assert (await gateway.frame())["op"] == 10
            return gateway

        yield open_one


def test_guild_ids_land_on_the_shard_asked_for() -> None:
    made = {
        (shard, count, n): guild_id_on_shard(shard, count, n)
        for count in (1, 2, 3, 16)
        for shard in range(count)
        for n in range(3)
    }
    assert all((gid >> 22) % count == shard for (shard, count, _), gid in made.items())
    for count in (1, 2, 3, 16):  # a different id for each shard and n of one count
        assert len({gid for (_, c, _), gid in made.items() if c == count}) == count * 3
    with pytest.raises(ValueError):
        guild_id_on_shard(4, 4)


async def test_gateway_bot_recommends_the_configured_shards(fake: FakeDiscord, bot: Bot) -> None:
    fake.recommended_shards = 3
    shards, url, limits = await bot.http.get_bot_gateway()
    assert (shards, url, limits["max_concurrency"]) == (3, fake.gateway_url, 1)


async def test_each_shard_gets_its_own_guilds_and_shard_0_the_dms(
    connect: Callable[[FakeDiscord], Awaitable[RawGateway]],
) -> None:
    on0, on1 = guild_id_on_shard(0, 2), guild_id_on_shard(1, 2)
    async with FakeDiscord(token=TOKEN) as fake:
        fake.add_guild(on0, "Zero", channels=[10], members=[(ANN, "ann")])
        fake.add_guild(on1, "One", channels=[11], members=[(ANN, "ann")])
        early = fake.push_message(11, "before anyone", author_id=ANN, guild_id=on1)
        zero = await connect(fake)
        ready = await zero.ready([0, 2])
        assert ready["shard"] == [0, 2] and ready["guilds"] == [
            {"id": str(on0), "unavailable": True}
        ]
        t, guild = await zero.event()
        assert (t, guild["id"]) == ("GUILD_CREATE", str(on0))
        one = await connect(fake)
        ready = await one.ready([1, 2])
        assert ready["guilds"] == [{"id": str(on1), "unavailable": True}]
        t, guild = await one.event()
        assert (t, guild["id"]) == ("GUILD_CREATE", str(on1))
        t, message = await one.event()  # kept until a session held its guild
        assert (t, message["id"]) == ("MESSAGE_CREATE", str(early))
        assert fake.identified == [(0, 2), (1, 2)] and fake.shards == [(0, 2), (1, 2)]

        dm = fake.push_message(DM, "a dm", author_id=ANN)
        in0 = fake.push_message(10, "in zero", author_id=ANN, guild_id=on0)
        in1 = fake.push_message(11, "in one", author_id=ANN, guild_id=on1)
        fake.push_interaction("help", [], user_id=ANN, channel_id=11, guild_id=on1)
        fake.push_interaction("help", [], user_id=ANN, channel_id=DM)
        later = guild_id_on_shard(1, 2, n=1)
        fake.add_guild(later, "Later", channels=[12])
        last = fake.push_message(DM, "last", author_id=ANN)
        # Each connection's events in order: nothing of the other shard's comes between.
        got0 = [await zero.event() for _ in range(4)]
        got1 = [await one.event() for _ in range(3)]
    assert [(t, d.get("guild_id")) for t, d in got0] == [
        ("MESSAGE_CREATE", None),
        ("MESSAGE_CREATE", str(on0)),
        ("INTERACTION_CREATE", None),
        ("MESSAGE_CREATE", None),
    ]
    assert [int(got0[i][1]["id"]) for i in (0, 1, 3)] == [dm, in0, last]
    assert [(t, d.get("guild_id")) for t, d in got1] == [
        ("MESSAGE_CREATE", str(on1)),
        ("INTERACTION_CREATE", str(on1)),
        ("GUILD_CREATE", None),
    ]
    assert (int(got1[0][1]["id"]), int(got1[2][1]["id"])) == (in1, later)


async def test_a_dropped_shard_is_no_longer_listed_and_resumes(
    connect: Callable[[FakeDiscord], Awaitable[RawGateway]],
) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        zero, one = await connect(fake), await connect(fake)
        await zero.ready([0, 2])
        session = (await one.ready([1, 2]))["session_id"]
        fake.drop_connection(1)
        assert fake.shards == [(0, 2)] and not fake.connected
        with pytest.raises(RuntimeError):
            fake.drop_connection()  # no unsharded session
        again = await connect(fake)
        await again.ws.send_json({"op": 6, "d": {"token": TOKEN, "session_id": session, "seq": 1}})
        assert (await again.event())[0] == "RESUMED"
        assert fake.shards == [(0, 2), (1, 2)] and fake.connected and fake.resume_count == 1


async def test_a_bad_shard_is_closed_4010_and_the_content_intent_without_the_flag_4014(
    connect: Callable[[FakeDiscord], Awaitable[RawGateway]],
) -> None:
    async with FakeDiscord(token=TOKEN, application_flags=0) as fake:
        beyond = await connect(fake)
        await beyond.identify([2, 2])
        assert await beyond.closed_with() == 4010
        content = await connect(fake)
        await content.identify(None)  # asks for the message content intent
        assert await content.closed_with() == 4014
        plain = await connect(fake)
        await plain.identify(None, intents=INTENTS & ~(1 << 15))
        assert (await plain.event())[0] == "READY"
        assert fake.identified == [None]


async def test_a_shard_whose_heartbeats_go_unanswered(
    connect: Callable[[FakeDiscord], Awaitable[RawGateway]],
) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        zero, one = await connect(fake), await connect(fake)
        await zero.ready([0, 2])
        await one.ready([1, 2])
        fake.answer_heartbeats(False, shard=1)
        for gateway in (zero, one):
            await gateway.ws.send_json({"op": 1, "d": 1})
        await fake.wait_for(lambda f: f.heartbeats == Counter({0: 1, 1: 1}), what="heartbeats")
        assert (await zero.frame())["op"] == 11
        fake.add_guild(guild_id_on_shard(1, 2), channels=[11])
        assert (await one.frame())["t"] == "GUILD_CREATE"  # no op 11 came first
        fake.answer_heartbeats(True, shard=1)
        await one.ws.send_json({"op": 1, "d": 2})
        assert (await one.frame())["op"] == 11
