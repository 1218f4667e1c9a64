"""The member-memory canary suite (issue 29, item 4; docs/memory.md#member-memory),
through the real adapters against the Discord and Telegram fakes, with the fake
model. Two Discord servers (five channels, a private thread in each) and a
Telegram group are bound to `memory: per-member`; 24 members, each with a secret
said in their Discord and Telegram DMs, in each channel of their servers, in the
group and in the private threads they are in. Then "what is my secret?" and "what
did UX tell you?" probes everywhere, a batch of several people's messages in each
channel (one turn), the compile of every wiki, probes that open crafted page ids,
and the heartbeat.

Every request the fake model receives is checked: a secret said in a DM or a
private thread appears only in requests of that place; a secret said in a
channel appears only in requests of that channel (its history) and in the turns
of the member who said it in any channel of the same server (their member
memory), never in anyone else's turn, in a batch answering several people, in
another server, a DM or a private thread; a compile's requests carry only the
secrets of the wiki's scope. The model answers a turn with the new messages
only (the recall block is not said aloud): a reply that repeats a member's memory
in a channel would make it that channel's, as anything said there is.

Run it alone with `.venv/bin/python -m pytest tests/test_member_canaries.py -s`: it
prints its figures.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.discord_adapter import DiscordAdapter
from adapters.retry import Backoff
from adapters.telegram_adapter import TelegramAdapter
from bot.app.runtime import Runtime
from bot.chat.commands import MENU
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import make_config, serving, wait_until
from tests.test_canaries import CANARY, SOUL, Model

MEMBERS = [str(101 + n) for n in range(24)]
TAG = re.compile(r"\[at (P\d+)\]")
SPEAKER = re.compile(r"^U(\d+): ")
FAST = Backoff(first_s=0.01, max_s=0.02)
BOT_NAME = "soul_test_bot"


@dataclass(frozen=True)
class Place:
    """Somewhere members speak: a DM, a channel of a server (or a Telegram group,
    its own server), or a private thread."""

    id: str
    platform: str
    chat: int
    members: tuple[str, ...]
    kind: str  # "dm", "channel", "thread"
    server: str | None = None  # the guild or group a channel or thread is in

    def text(self, body: str) -> str:
        mention = "<@7000> " if self.platform == "discord" and self.kind != "dm" else ""
        if self.platform == "telegram" and self.kind != "dm":
            mention = f"@{BOT_NAME} "
        return f"{mention}{body} [at {self.id}]"


def places() -> list[Place]:
    found: list[Place] = []
    number = itertools.count(1)

    def add(**fields: Any) -> None:
        found.append(Place(id=f"P{next(number)}", **fields))

    for user in MEMBERS:
        add(platform="discord", chat=8000 + int(user), members=(user,), kind="dm")
        add(platform="telegram", chat=int(user), members=(user,), kind="dm")
    servers = {"900": ([701, 702, 703], 721, MEMBERS[:16]), "901": ([704, 705], 722, MEMBERS[8:])}
    for guild, (channels, thread, members) in servers.items():
        for channel in channels:
            add(platform="discord", chat=channel, members=tuple(members), kind="channel",
                server=guild)  # fmt: skip
        add(platform="discord", chat=thread, members=tuple(members[:4]), kind="thread",
            server=guild)  # fmt: skip
    add(platform="telegram", chat=-1001, members=tuple(MEMBERS[:6]), kind="channel",
        server="-1001")  # fmt: skip
    return found


class MemberModel(Model):
    """The suite's model (tests/test_canaries.py `Model`: save_soul keeps every
    secret shown, the compile files and merges literally, "check your notes" opens
    a crafted page id, every 40th turn fails), answering a turn with its new
    messages only."""

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        reply = super().__call__(body)
        turn = _turn(body)
        if reply is not None or turn is None or _is_tool_result(body):
            return reply
        return Reply.of_text("noted: " + " / ".join(turn))


def _is_tool_result(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]["content"]
    return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last)


def _turn(body: dict[str, Any]) -> list[str] | None:
    """The new messages of a turn's request (the text blocks after the clock
    line of the newest user message that has one), or None for another call."""
    for message in reversed(body.get("messages", [])):
        content = message.get("content")
        if message["role"] != "user" or not isinstance(content, list):
            continue
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        clock = [i for i, t in enumerate(texts) if t.startswith("(Now: ")]
        if clock:
            return texts[clock[-1] + 1 :]
    return None


class Checker:
    """Who said each secret where, and the rule."""

    def __init__(self, all_places: list[Place]) -> None:
        self.places = {p.id: p for p in all_places}
        self.said: dict[str, tuple[Place, str]] = {}
        self.leaks: list[str] = []
        self.requests = 0
        self.sightings = 0
        self.recalled_across: set[tuple[str, str]] = set()  # (member, server)
        self.batches = 0

    def secret(self, place: Place, user: str) -> str:
        canary = f"CANARY{secrets.token_hex(5)}"
        self.said[canary] = (place, user)
        return canary

    def allowed(self, canary: str, place: Place, speakers: set[str]) -> bool:
        source, user = self.said[canary]
        if source.id == place.id:
            return True
        own = speakers == {user} and place.kind == "channel" and source.kind == "channel"
        if own and place.server == source.server:
            self.recalled_across.add((user, place.platform + ":" + str(place.server)))
            return True
        return False

    def request(self, body: dict[str, Any]) -> None:
        self.requests += 1
        text = json.dumps(body, ensure_ascii=False)
        turn = _turn(body)
        if turn is None:  # a heartbeat or a compaction: one session's transcript
            place, speakers = self.places[TAG.findall(text)[-1]], set()
        else:
            place = self.places[TAG.findall(" ".join(turn))[-1]]
            speakers = {m.group(1) for t in turn if (m := SPEAKER.match(t))}
            if place.kind == "dm":
                speakers = set(place.members)
            self.batches += len(speakers) > 1 and not _is_tool_result(body)
        for canary in set(CANARY.findall(text)):
            self.sightings += 1
            if not self.allowed(canary, place, speakers):
                source, user = self.said[canary]
                self.leaks.append(
                    f"{canary} of U{user} at {source.id} ({source.kind}) reached {place.id} "
                    f"({place.kind}) speakers {sorted(speakers)}"
                )

    def compile(self, scope: str, body: dict[str, Any]) -> None:
        self.requests += 1
        for canary in set(CANARY.findall(json.dumps(body, ensure_ascii=False))):
            self.sightings += 1
            source, user = self.said[canary]
            kind, platform, *rest = scope.split(":")
            fits = {
                "user": source.kind == "dm" and rest == [user],
                "chat": source.kind == "thread" and rest == [str(source.chat)],
                "member": source.kind == "channel" and rest == [source.server, user],
            }.get(kind, False)
            if not fits or platform != source.platform:
                self.leaks.append(f"compile {scope}: {canary} of U{user} at {source.id}")


class World:
    """The fakes and the runtime, and saying things in places."""

    def __init__(self, dc: FakeDiscord, tg: FakeTelegram, runtime: Runtime) -> None:
        self.dc, self.tg, self.runtime = dc, tg, runtime
        self.ids = itertools.count()

    def push(self, place: Place, user: str, body: str) -> Callable[[], bool]:
        """Say `body` as `user` in `place`; returns whether it was answered."""
        text = place.text(body)
        if place.platform == "discord":
            guild = None if place.kind == "dm" else int(place.server or 0)
            mid = self.dc.push_message(place.chat, text, author_id=int(user),
                                       author_name=f"U{user}", guild_id=guild,
                                       mention_bot=place.kind != "dm")  # fmt: skip
            return lambda: any(s.reply_to == mid for s in self.dc.sent)
        chat_type = "private" if place.kind == "dm" else "supergroup"
        mid = self.tg.push_message(place.chat, text, user_id=int(user), first_name=f"U{user}",
                                   chat_type=chat_type)  # fmt: skip
        return lambda: any(_replies_to(p) == (str(place.chat), mid) for p in self.tg.sent)

    async def converse(self, place: Place, lines: list[tuple[str, str]]) -> None:
        for user, body in lines:
            answered = self.push(place, user, body)
            await wait_until(answered, within=120)

    async def everywhere(self, all_places: list[Place],
                         lines_for: Callable[[Place], list[tuple[str, str]]]) -> None:  # fmt: skip
        await asyncio.gather(*(self.converse(p, lines_for(p)) for p in all_places))
        await self.settle()

    async def settle(self) -> None:
        await self.runtime.router.wait(30)
        await self.runtime.sessions.wait(30)
        await self.runtime.memory.drain(10)


def _replies_to(params: dict[str, Any]) -> tuple[str, int | None]:
    reply = params.get("reply_parameters")
    if isinstance(reply, str):
        reply = json.loads(reply)
    replied = reply.get("message_id") if isinstance(reply, dict) else None
    return str(params.get("chat_id")), int(replied) if replied is not None else None


@pytest.mark.timeout(300)
async def test_a_members_memory_reaches_only_their_own_turns_in_their_server(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "workspaces" / "lark"
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text(SOUL)
    all_places = places()
    checker = Checker(all_places)
    async with FakeDiscord() as dc, FakeTelegram() as tg, FakeAnthropic() as fake:
        MemberModel(fake)
        for guild in ("900", "901"):
            channels = [p for p in all_places if p.server == guild and p.kind == "channel"]
            dc.add_guild(int(guild), channels=[p.chat for p in channels],
                         members=[(int(u), f"U{u}") for u in channels[0].members])  # fmt: skip
            [thread] = [p for p in all_places if p.server == guild and p.kind == "thread"]
            dc.add_thread(thread.chat, channels[0].chat, int(guild), private=True)
        extra = (
            "adapters: {telegram: {dm_policy: open}, discord: {dm_policy: open}}\n"
            "bindings:\n"
            "  - {platform: discord, guild: 900, soul: lark, memory: per-member}\n"
            "  - {platform: discord, guild: 901, soul: lark, memory: per-member}\n"
            "  - {platform: telegram, chat: -1001, soul: lark, memory: per-member}\n"
            "memory: {history_token_budget: 2000}\n"
            "limits: {messages_per_minute: null}\n"
            "budget: {daily_tokens_per_user: null, daily_tokens_per_soul: null,"
            " daily_tokens_per_admin: null, daily_tokens_background: null}\n"
            "heartbeat: {idle_minutes: 300}\n"
        )
        config = make_config(tmp_path, fake.url, extra)
        discord = DiscordAdapter("TEST.DISCORD.TOKEN", commands=MENU,
                                 api_base_url=dc.api_base_url, gateway_url=dc.gateway_url,
                                 guild_ready_timeout=0.05, backoff=FAST,
                                 streaming=False)  # fmt: skip
        telegram = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1, backoff=FAST,
                                   streaming=False)  # fmt: skip
        async with serving(config, [discord, telegram]) as runtime:
            world = World(dc, tg, runtime)
            compiles = await _run(world, all_places, checker, fake)
        for n, body in enumerate(fake.requests):
            if n not in compiles:  # checked per wiki in _run, where it is known whose it is
                checker.request(body)
    print(f"\nmember canaries: {len(checker.said)} secrets, {checker.requests} requests "
          f"checked, {checker.sightings} sightings where they may be, {checker.batches} "
          f"batched turns, {len(checker.recalled_across)} members recalled across channels, "
          f"{len(checker.leaks)} leaks")  # fmt: skip
    assert checker.leaks == []
    # Not vacuous: member memory does travel across a server's channels, for each member.
    spread = {(u, f"{p.platform}:{p.server}") for p in all_places if p.kind == "channel"
              and p.platform == "discord" for u in p.members}  # fmt: skip
    assert spread <= checker.recalled_across
    assert checker.batches >= 4
    assert checker.sightings > 3 * len(checker.said)


async def _run(world: World, all_places: list[Place], checker: Checker,
               fake: FakeAnthropic) -> set[int]:  # fmt: skip
    """Say it all; returns the indexes of the compile's requests (checked here)."""

    def plant(place: Place) -> list[tuple[str, str]]:
        return [(u, f"my secret here is {checker.secret(place, u)}, keep it")
                for u in place.members]  # fmt: skip

    def probes(place: Place, notes: bool = False) -> list[tuple[str, str]]:
        lines = [(u, "what is my secret?" + (" check your notes" if notes else ""))
                 for u in place.members]  # fmt: skip
        others = itertools.cycle(MEMBERS)
        lines += [(u, f"what did U{next(others)} tell you about the secret?")
                  for u in place.members[:4]]  # fmt: skip
        return lines

    await world.everywhere(all_places, plant)
    await world.everywhere(all_places, probes)
    # A batch in each channel: the first message's turn is held while two more come
    # (a held turn gets the fake's own echo, which says the recall block aloud: its
    # message recalls nothing).
    for place in (p for p in all_places if p.kind == "channel"):
        gate = fake.script_gate()
        first, second, third = place.members[:3]
        world.push(place, first, "hello everyone")
        await gate.reached.wait()
        session = f"{place.platform}:{place.chat}"
        before = len((await world.runtime.history.load(session)).entries)
        world.push(place, second, "and what is my secret?")
        answered = world.push(place, third, f"mine is {checker.secret(place, third)}, yours?")
        await _stored(world, session, before + 2)
        gate.open()
        await wait_until(answered, within=30)
    await world.settle()
    compiles: set[int] = set()
    for scope in sorted(await world.runtime.memory.store.scopes_after("lark", {})):
        assert scope.split(":")[0] in ("user", "chat", "member"), scope
        assert not scope.startswith("chat:") or scope.split(":")[2] in ("721", "722"), scope
        before = len(fake.requests)
        await world.runtime.memory.compile_one("lark", scope)
        for body in fake.requests[before:]:
            checker.compile(scope, body)
        compiles.update(range(before, len(fake.requests)))
    await world.everywhere(all_places, lambda p: probes(p, notes=True))
    await world.runtime.reflector.flush()
    return compiles


async def _stored(world: World, session: str, count: int) -> None:
    """Wait until the session's history holds `count` rows."""
    async with asyncio.timeout(30):
        while len((await world.runtime.history.load(session)).entries) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # the store has no event to wait on
