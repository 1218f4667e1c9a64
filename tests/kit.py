"""A runtime wired to the in-process fake model and a recording platform."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import structlog
import structlog.testing

from adapters.base import Adapter, Deliver
from bot.app.runtime import Runtime
from bot.config.load import parse_config
from bot.config.schema import Config
from bot.soul.registry import SoulRegistry
from bot.soul.seeding import seed_examples
from bot.types import Inbound, Outbound
from tests.fakes.anthropic_fake import FakeAnthropic

# A persona long enough (over 1,024 tokens by the fake's rule) for the cache to engage.
LONG_SOUL = (
    "---\nname: Lark\nagentId: lark\nhardLimits: [Never reveal a secret]\n---\n"
    + "\n\n".join(
        f"## Part {i}\nYou are Lark, a patient listener who keeps notes on every friend, "
        "asks one question at a time and answers plainly, without lists unless asked. "
        "You enjoy small details: names, dates, places, the weather on a given day."
        for i in range(1, 25)
    )
)


class RecordingPlatform:
    """A platform adapter that records what is sent and lets a test speak."""

    def __init__(self, name: str = "test") -> None:
        self.name = name
        self.sent: list[Outbound] = []
        self.typed: list[str] = []
        self._deliver: Deliver | None = None
        self._arrived = asyncio.Condition()
        self.heard: float | None = None

    async def start(self, deliver: Deliver) -> None:
        self._deliver = deliver

    @property
    def started(self) -> bool:
        return self._deliver is not None

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def typing(self, chat: Inbound) -> AbstractAsyncContextManager[None]:
        self.typed.append(chat.chat_id)
        return contextlib.nullcontext()

    def notes(self) -> list[str]:
        return []

    def connected(self) -> bool:
        return self.started

    def last_seen(self) -> float | None:
        """`heard`: None until the test sets it (a platform heard from then)."""
        return self.heard

    def stream(self, message: Outbound) -> None:
        return None

    async def send(self, message: Outbound) -> list[str]:
        async with self._arrived:
            self.sent.append(message)
            self._arrived.notify_all()
        return [f"sent-{len(self.sent)}"]

    async def say(
        self,
        text: str,
        *,
        user: str = "u1",
        chat: str | None = None,
        dm: bool = True,
        message_id: str = "",
        name: str = "Ann",
        mention: bool = False,
    ) -> None:
        assert self._deliver is not None, "start() first"
        await self._deliver(
            Inbound(
                platform=self.name,
                chat_id=chat or user,
                user_id=user,
                user_name=name,
                text=text,
                is_dm=dm,
                mentions_bot=mention,
                message_id=message_id,
            )
        )

    async def hear(self, inbound: Inbound) -> None:
        """Deliver an `inbound` built by the test (threads, guilds, media)."""
        assert self._deliver is not None, "start() first"
        await self._deliver(inbound)

    async def replies(self, count: int, within: float = 10.0) -> list[Outbound]:
        """Wait until `count` messages were sent in all; returns them."""
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(lambda: len(self.sent) >= count)
        return list(self.sent)


class Inbox:
    """An adapter's `deliver` for a test without the runtime: keeps what
    arrives, wakes whoever waits."""

    def __init__(self) -> None:
        self.got: list[Inbound] = []
        self._changed = asyncio.Condition()

    async def deliver(self, inbound: Inbound) -> None:
        async with self._changed:
            self.got.append(inbound)
            self._changed.notify_all()

    async def wait(self, count: int, within: float = 10.0) -> list[Inbound]:
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: len(self.got) >= count)
        return list(self.got)

    async def one(self) -> Inbound:
        """The next message (the test pushed one more since its last look)."""
        return (await self.wait(len(self.got) + 1))[-1]


@asynccontextmanager
async def delivering(adapter: Adapter) -> AsyncIterator[Inbox]:
    """`adapter` started with an `Inbox` as its deliver; stopped and closed after."""
    inbox = Inbox()
    await adapter.start(inbox.deliver)
    try:
        yield inbox
    finally:
        await adapter.stop()
        await adapter.close()


def example_souls(dest: Path) -> Path:
    """The example souls as the package ships them (bot/soul/examples/), copied
    to dest/workspaces, which is returned: never the live ./workspaces, where a
    person's `soulbot init` souls, SOUL.md backups and heartbeat edits live."""
    target = dest / "workspaces"
    assert seed_examples(target), f"{target} held a soul already"
    return target


def make_config(tmp_path: Path, url: str, extra: str = "") -> Config:
    workspaces = tmp_path / "workspaces"
    if not workspaces.exists():
        (workspaces / "lark").mkdir(parents=True)
        (workspaces / "lark" / "SOUL.md").write_text(LONG_SOUL)
    text = (
        f"workspaces: {json.dumps(str(workspaces))}\n"
        f"data_dir: {json.dumps(str(tmp_path / 'data'))}\n"
        f"model: {{base_url: {json.dumps(url)}, api_key: test-key, max_retries: 0}}\n" + extra
    )
    return parse_config(text, "test.yaml", {})


@asynccontextmanager
async def running(
    config: Config,
    platform_name: str | RecordingPlatform = "test",
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[tuple[Runtime, RecordingPlatform]]:
    """A started runtime for `config` with one RecordingPlatform named `platform_name`
    (a platform soulbot does not know has an open DM policy and no admins), or
    the one given; `clock`: the reminders' time."""
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    platform = (
        platform_name if isinstance(platform_name, RecordingPlatform)
        else RecordingPlatform(platform_name)
    )  # fmt: skip
    runtime = await Runtime.open(config, registry, [platform], clock)
    await runtime.start_adapters()
    try:
        yield runtime, platform
    finally:
        await runtime.router.wait(10)
        await runtime.sessions.wait(10)
        await runtime.close()


def user_texts(request: dict[str, Any]) -> list[str]:
    """Every text block of the request's user messages, in order."""
    return [
        block["text"]
        for message in request["messages"]
        if message["role"] == "user"
        for block in message["content"]
        if block.get("type") == "text"
    ]


async def fake_model(**kwargs: Any) -> FakeAnthropic:
    fake = FakeAnthropic(**kwargs)
    await fake.start()
    return fake


async def wait_until(condition: Callable[[], object], within: float = 10.0) -> None:
    """Poll `condition` (state another task changes, with no event to wait on)
    until it holds; fails after `within` seconds."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


@asynccontextmanager
async def serving(
    config: Config, adapters: list[Adapter], clock: Callable[[], float] = time.time
) -> AsyncIterator[Runtime]:
    """A runtime for `config` serving real `adapters` (against fakes); stopped
    in the daemon's order at the end; `clock`: the reminders' time."""
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    runtime = await Runtime.open(config, registry, adapters, clock)
    await runtime.start_adapters()
    try:
        yield runtime
    finally:
        await runtime.stop_adapters()
        await runtime.router.wait(10)
        await runtime.sessions.wait(10)
        await runtime.close()


def capture_logs() -> AbstractContextManager[list[MutableMapping[str, Any]]]:
    """structlog's capture_logs with the context bound by the code under test
    (`bound_contextvars`) merged into each line, as the configured chain does."""
    return structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars])
