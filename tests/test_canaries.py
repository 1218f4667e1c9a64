"""The canary suite (issue 12): many people, each with a secret said in every
place they can speak (Telegram and Discord DMs, groups, channels, public and
private threads), and every path a fact could take exercised: recall, the scope
index, `read_memory_page` with crafted ids, the compile, the heartbeat, history
compaction, a batch of several people's messages, failed model calls, admin
commands and "what did X tell you?" prompts. Every request the fake model
receives, and every reply the bot sends, is checked against who can read the
place it answers: a secret may appear only where everyone who can read it
could read the place the secret was said in.

Run it alone with `.venv/bin/python -m pytest tests/test_canaries.py -s`: it
prints the figures (the README quotes them).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot import prompts
from bot.app.runtime import Runtime
from bot.soul.registry import SoulRegistry
from bot.types import Inbound
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.fakes.librarian import librarian
from tests.kit import RecordingPlatform, make_config, wait_until

USERS = [str(101 + n) for n in range(24)]
ADMIN = USERS[0]
TAG = re.compile(r"\[at (P\d+)\]")
CANARY = re.compile(r"CANARY[0-9a-f]{10}")
# The heartbeat soul: regions, so conversations are reflected on.
SOUL = (
    "---\nagentId: lark\nname: Lark\n---\n# SOUL.md\n\n<!-- SOUL_META -->\n- version: 1.0.0\n"
    "- update_count: 0\n- min_conversation_tokens: 1\n\n"
    "<!-- SOUL_CORE -->\nYou are Lark, a patient listener.\n\n## Rules\n- Be kind.\n\n"
    "<!-- SOUL_MEMORY -->\n## Memory\n\n<!-- SOUL_AUTOBIOGRAPHY -->\n## Autobiography\n"
)
CRAFTED_IDS = [
    "concepts/notes", "self", "index", "../self", "../../user/telegram/102/self",
    "user/telegram/102/concepts/notes", "/etc/passwd", "entities/user-102", "log/2026-12-01",
    "..%2f..%2fself", "concepts/../../chat/telegram/-1002/concepts/notes", "user:telegram:102",
]  # fmt: skip


@dataclass(frozen=True)
class Place:
    """Somewhere people speak, and who can read it."""

    id: str
    platform: str
    chat_id: str
    members: frozenset[str]
    is_dm: bool = False
    thread_id: str | None = None
    private_thread: bool = False

    def inbound(self, user: str, text: str, message_id: str) -> Inbound:
        return Inbound(
            platform=self.platform, chat_id=self.chat_id, user_id=user, user_name=f"User{user}",
            text=f"{text} [at {self.id}]", is_dm=self.is_dm, mentions_bot=not self.is_dm,
            message_id=message_id, thread_id=self.thread_id, private_thread=self.private_thread,
            guild_id=None if self.is_dm or self.platform == "telegram" else "900",
        )  # fmt: skip


def places() -> list[Place]:
    """Two DMs a person (Telegram, Discord); four Telegram groups and four Discord
    channels of six, each channel with a public thread and a private one of three."""
    found: list[Place] = []
    number = itertools.count(1)

    def add(**fields: Any) -> None:
        found.append(Place(id=f"P{next(number)}", **fields))

    for user in USERS:
        add(platform="telegram", chat_id=user, members=frozenset({user}), is_dm=True)
        add(platform="discord", chat_id=f"8{user}", members=frozenset({user}), is_dm=True)
    for g in range(4):
        members = frozenset(USERS[g * 6 : g * 6 + 6])
        add(platform="telegram", chat_id=f"-100{g}", members=members)
        channel = f"70{g}"
        add(platform="discord", chat_id=channel, members=members)
        add(platform="discord", chat_id=channel, members=members, thread_id=f"71{g}")
        add(platform="discord", chat_id=channel, members=frozenset(sorted(members)[:3]),
            thread_id=f"72{g}", private_thread=True)  # fmt: skip
    return found


class Model:
    """The fake model's answers: save_soul keeps every secret it is shown (so the
    heartbeat's self pages hold them), a turn that asks to check notes opens a
    crafted page id, every 40th turn fails; the rest is the fake's echo, which
    repeats the recall block and the messages (so secrets travel if they can)."""

    def __init__(self, fake: FakeAnthropic) -> None:
        self.turns = 0
        self.ids = itertools.cycle(CRAFTED_IDS)
        fake.responder = self

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        text = json.dumps(body)
        if body.get("tool_choice", {}).get("name") == "save_soul":
            facts = [{"fact": f"They said {c}", "importance": 0.9}
                     for c in sorted(set(CANARY.findall(text)))[:5]]  # fmt: skip
            return Reply.of_tool_use(
                "save_soul",
                {
                    "reflection": "We talked about secrets.",
                    "memory_updates": facts,
                    "rule_updates": [],
                },
            )
        compiled = librarian(body)  # the compile files and merges as a literal model would
        if compiled is not None or prompts.COMPACT_SYSTEM in text:
            return compiled
        last = body["messages"][-1]["content"]
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last):
            return None
        self.turns += 1
        if self.turns % 40 == 0:
            return Reply.of_error(529)
        if "check your notes" in json.dumps(last):
            return Reply.of_tool_use("read_memory_page", {"id": next(self.ids)})
        return None


def _texts(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("type") == "text":
            yield str(node.get("text", ""))
        for value in node.values():
            yield from _texts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _texts(value)


class Checker:
    """Who said each secret where, and the leak rule."""

    def __init__(self, all_places: list[Place]) -> None:
        self.places = {p.id: p for p in all_places}
        self.said: dict[str, Place] = {}
        self.requests = 0
        self.replies = 0
        self.leaks: list[str] = []
        self.sightings = 0

    def secret(self, place: Place) -> str:
        canary = f"CANARY{secrets.token_hex(5)}"
        self.said[canary] = place
        return canary

    def check(self, what: str, readers: frozenset[str], text: str) -> None:
        for canary in set(CANARY.findall(text)):
            self.sightings += 1
            source = self.said[canary]
            if not readers <= source.members:
                self.leaks.append(f"{what}: {canary} from {source.id} reached {sorted(readers)}")

    def request_place(self, body: dict[str, Any]) -> Place:
        """The place a turn, a heartbeat or a compaction answers: the tag of the
        newest message it carries (a transcript is one session's)."""
        system = json.dumps(body.get("system"))
        if prompts.COMPACT_SYSTEM in system or body.get("tool_choice", {}).get("name"):
            tags = TAG.findall(json.dumps(body["messages"]))
            return self.places[tags[-1]]
        for message in reversed(body["messages"]):
            if message["role"] != "user":
                continue
            tags = [t for text in _texts(message["content"]) for t in TAG.findall(text)]
            if tags:
                return self.places[tags[-1]]
        raise AssertionError(f"no place in a request: {json.dumps(body)[:300]}")


async def _converse(platform: RecordingPlatform, place: Place, lines: list[tuple[str, str]],
                    ids: Iterator[int]) -> None:  # fmt: skip
    """Say each (user, text) in `place`, one at a time, each waiting for its answer."""

    scanned, count = 0, 0

    def answered() -> int:  # polled by ~100 conversations at once: reads only what is new
        nonlocal scanned, count
        sent = platform.sent
        count += sum(1 for m in sent[scanned:]
                     if (m.chat_id, m.thread_id) == (place.chat_id, place.thread_id))  # fmt: skip
        scanned = len(sent)
        return count

    for user, text in lines:
        before = answered()
        await platform.hear(place.inbound(user, text, f"m{next(ids)}"))
        await wait_until(lambda before=before: answered() > before, within=30)


@pytest.mark.timeout(240)
async def test_no_secret_reaches_anyone_who_could_not_read_it(tmp_path: Path) -> None:
    folder = tmp_path / "workspaces" / "lark"
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text(SOUL)
    extra = (
        f"admins: {{telegram: [{ADMIN}], discord: [{ADMIN}]}}\n"
        "adapters: {telegram: {dm_policy: open}, discord: {dm_policy: open}}\n"
        # The binding the example config had: per-user must not open a DM in a group.
        "bindings: [{platform: telegram, soul: lark, memory: per-user}]\n"
        "memory: {history_token_budget: 2000}\n"
        "limits: {messages_per_minute: null}\n"
        "budget: {daily_tokens_per_user: null, daily_tokens_per_soul: null,"
        " daily_tokens_per_admin: null, daily_tokens_background: null}\n"
        "heartbeat: {idle_minutes: 300}\n"
    )
    all_places = places()
    checker = Checker(all_places)
    ids = itertools.count()
    async with FakeAnthropic() as fake:
        Model(fake)
        config = make_config(tmp_path, fake.url, extra)
        registry = SoulRegistry(config.workspaces)
        registry.reload_all()
        telegram, discord = RecordingPlatform("telegram"), RecordingPlatform("discord")
        runtime = await Runtime.open(config, registry, [telegram, discord])
        await runtime.start_adapters()
        platforms = {"telegram": telegram, "discord": discord}
        try:
            await _run(runtime, fake, platforms, all_places, checker, ids)
        finally:
            await runtime.sessions.wait(10)
            await runtime.close()
        for body in fake.requests:
            checker.requests += 1
            if prompts.COMPILE_SYSTEM in json.dumps(body.get("system")):
                continue  # checked per wiki in _run, where it is known whose it is
            place = checker.request_place(body)
            checker.check("request", place.members, json.dumps(body, ensure_ascii=False))
    for platform in platforms.values():
        for message in platform.sent:
            place = next(p for p in all_places if (p.platform, p.chat_id, p.thread_id)
                         == (message.platform, message.chat_id, message.thread_id))  # fmt: skip
            checker.replies += 1
            checker.check("reply", place.members, message.text)
            if not place.is_dm:  # admin replies in groups name no private scope
                assert "user:" not in message.text, message.text
    print(f"\ncanaries: {len(checker.said)} secrets, {checker.requests} requests and "
          f"{checker.replies} replies checked, {checker.sightings} sightings where they "
          f"may be, {len(checker.leaks)} leaks")  # fmt: skip
    assert checker.leaks == []
    assert checker.requests >= 2000
    # Not vacuous: secrets do travel, where everyone may read them.
    assert checker.sightings > 10 * len(checker.said)


async def _run(runtime: Runtime, fake: FakeAnthropic, platforms: dict[str, RecordingPlatform],
               all_places: list[Place], checker: Checker, ids: Iterator[int]) -> None:  # fmt: skip
    async def everywhere(lines_for: Any) -> None:
        await asyncio.gather(*(
            _converse(platforms[p.platform], p, lines_for(p), ids) for p in all_places
        ))  # fmt: skip
        await runtime.router.wait(30)
        await runtime.sessions.wait(30)
        await runtime.memory.drain(10)

    def secrets_of(place: Place) -> list[tuple[str, str]]:
        return [(u, f"my secret here is {checker.secret(place)}, keep it")
                for u in sorted(place.members)]  # fmt: skip

    def probes(place: Place, notes: bool = False) -> list[tuple[str, str]]:
        lines = []
        for u, other in itertools.product(sorted(place.members), USERS[:8]):
            ask = f"what did User{other} tell you about the secret?"
            lines.append((u, ask + (" check your notes" if notes else "")))
        return lines[:12]

    await everywhere(secrets_of)
    await everywhere(probes)
    # A batch: several people at once in each group, one turn in the group's scope.
    for place in (p for p in all_places if not p.is_dm and p.thread_id is None):
        for user in sorted(place.members)[:3]:
            await platforms[place.platform].hear(
                place.inbound(
                    user, f"quick, the secret is {checker.secret(place)}", f"m{next(ids)}"
                )
            )
    await runtime.router.wait(30)  # the router takes messages at once, then stores them
    await runtime.sessions.wait(30)
    await runtime.memory.drain(10)
    # The compile, one wiki at a time: its requests are that wiki's.
    for scope in sorted(await runtime.memory.store.scopes_after("lark", {})):
        readers = _readers(scope, all_places)
        before = len(fake.requests)
        await runtime.memory.compile_one("lark", scope)
        for body in fake.requests[before:]:
            checker.check(f"compile {scope}", readers, json.dumps(body, ensure_ascii=False))
    await everywhere(lambda p: probes(p, notes=True))
    await runtime.reflector.flush()
    await everywhere(lambda p: probes(p, notes=True))
    # Admin commands, in a DM and in a group.
    group = next(p for p in all_places if not p.is_dm and ADMIN in p.members)
    dm = next(p for p in all_places if p.is_dm and ADMIN in p.members)
    for place in (group, dm):
        await _converse(platforms[place.platform], place,
                        [(ADMIN, "/soul status"), (ADMIN, "/soul usage")], ids)  # fmt: skip


def _readers(scope: str, all_places: list[Place]) -> frozenset[str]:
    """Who can read every place whose traces a scope holds."""
    kind, platform, key = scope.split(":")
    for place in all_places:
        if place.platform != platform:
            continue
        if kind == "user" and place.is_dm and key in place.members:
            return frozenset({key})
        if kind == "chat" and not place.is_dm and key in (place.thread_id, place.chat_id):
            if key == place.chat_id and place.private_thread:
                continue
            return place.members
    raise AssertionError(f"no place for scope {scope}")
