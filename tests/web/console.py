"""A running bot with its web console, for the console's tests: the runtime (a
recording `telegram` platform, the fake model), the console served on a free
loopback port, and the seeds every test looks for: a private DM's canary, in
its trace and on its private wiki page, and secrets in the config."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bot.app.daemon import Daemon
from bot.app.runtime import Runtime
from bot.memory.page import Page
from bot.web.service import serving_console
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, fake_model, make_config, running

CANARY = "CANARY-private-7f3a"  # said in a DM: in no page, ever
SECRETS = ("test-key", "123456:TG-SECRET-CANARY", "DISCORD.SECRET.CANARY")
ADMIN = "42"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def daemon_config(tmp_path: Path, telegram: str, listen: str, more: str = "") -> Path:
    """soulbot.yaml in `tmp_path` for `soulbot run` with the console on `listen`,
    Telegram at `telegram` (its token from $TELEGRAM_TOKEN), admin telegram:1."""
    path = tmp_path / "soulbot.yaml"
    path.write_text(
        "default_soul: wren\nmodel: {max_retries: 0}\nadmins: {telegram: [1]}\n"
        f"adapters: {{telegram: {{token: '${{TELEGRAM_TOKEN}}', base_url: '{telegram}'}}}}\n"
        f"web: {{enabled: true, listen: '{listen}'{more}}}\n"
    )
    return path


@dataclass
class Console:
    runtime: Runtime
    platform: RecordingPlatform
    fake: FakeAnthropic
    url: str
    daemon: Daemon


@asynccontextmanager
async def console(tmp_path: Path, public_url: str = "") -> AsyncIterator[Console]:
    async with AsyncExitStack() as stack:
        fake = await fake_model()
        stack.push_async_callback(fake.stop)
        port = free_port()
        extra = (
            f"admins: {{telegram: [{ADMIN}]}}\n"
            f"web: {{enabled: true, listen: '127.0.0.1:{port}', public_url: '{public_url}'}}\n"
            f"adapters: {{telegram: {{token: '{SECRETS[1]}'}},"
            f" discord: {{token: '{SECRETS[2]}'}}}}\n"
        )
        config = make_config(tmp_path, fake.url, extra)
        runtime, platform = await stack.enter_async_context(
            running(config, RecordingPlatform("telegram"))
        )
        await platform.say(f"remember {CANARY}", user=ADMIN)
        await platform.replies(1)
        await runtime.memory.drain(10)
        scope = f"user:telegram:{ADMIN}"
        wiki = runtime.memory.wiki("lark", scope)
        assert wiki is not None
        wiki.write_page(Page.new("people/ann", body=f"Ann said {CANARY}."))
        daemon = Daemon(runtime)
        runner = await stack.enter_async_context(serving_console(daemon))
        await web.TCPSite(runner, "127.0.0.1", port).start()
        yield Console(runtime, platform, fake, f"http://127.0.0.1:{port}", daemon)
