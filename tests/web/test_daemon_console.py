"""The console as `soulbot run` serves it (a process, with the Telegram and model
fakes): `soulbot web-login`, another process, prints a link the daemon takes;
`/soul web` gives an admin one in a DM and refuses in a group; `soulbot check`
says when the console listens off loopback without HTTPS."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp

from tests.daemons import RunningDaemon, daemon_env
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import example_souls
from tests.run_cli import soulbot
from tests.web.console import daemon_config, free_port

LINK = re.compile(r"http://127\.0\.0\.1:\d+/login/[A-Za-z0-9_-]+")


async def _signs_in(link: str) -> bool:
    token = link.rsplit("/", 1)[1]
    base = link.split("/login/")[0]
    jar = aiohttp.CookieJar(unsafe=True)
    async with (
        aiohttp.ClientSession(cookie_jar=jar) as http,
        http.post(f"{base}/login", data={"token": token}) as answer,
    ):
        return answer.status == 200 and "wren" in await answer.text()


async def test_the_daemon_serves_the_console_and_takes_the_links(tmp_path: Path) -> None:
    example_souls(tmp_path)
    async with FakeTelegram() as tg, FakeAnthropic() as model:
        config = daemon_config(tmp_path, tg.base_url, f"127.0.0.1:{free_port()}")
        env = daemon_env(model.url, TELEGRAM_TOKEN=tg.token)
        daemon = RunningDaemon(tmp_path, config, env)
        await daemon.start()
        try:
            assert daemon.named("web.listening")
            printed = await asyncio.to_thread(soulbot, "web-login", "--config", str(config),
                                              cwd=tmp_path, env=env)  # fmt: skip
            assert printed.returncode == 0, printed.stderr
            link = LINK.fullmatch(printed.stdout.strip())
            assert link is not None and await _signs_in(link.group())
            assert not await _signs_in(link.group())  # once

            tg.push_message(-100, "/soul web", user_id=1, chat_type="group")
            tg.push_message(1, "/soul web", user_id=1)
            group, dm = await tg.wait_sent(2, timeout=20)
            assert "private chat" in group["text"] and not LINK.search(group["text"])
            given = LINK.search(dm["text"])
            assert given is not None and await _signs_in(given.group())
            await daemon.wait_for("web.login", count=2)
            logged = repr(daemon.events)
            assert given.group().rsplit("/", 1)[1] not in logged
        finally:
            assert await daemon.stop() == 0


def test_check_warns_off_loopback_without_https(tmp_path: Path) -> None:
    example_souls(tmp_path)
    tg = "http://127.0.0.1:9/bot"  # nothing is asked offline
    open_config = daemon_config(tmp_path, tg, "0.0.0.0:8080")
    out = soulbot("check", "--config", str(open_config), cwd=tmp_path,
                  env={"TELEGRAM_TOKEN": "123:abc"}).stdout  # fmt: skip
    assert "web.listen 0.0.0.0:8080 is not loopback" in out
    behind = daemon_config(tmp_path, tg, "0.0.0.0:8080", ", public_url: 'https://bot.example.org'")
    out = soulbot("check", "--config", str(behind), cwd=tmp_path,
                  env={"TELEGRAM_TOKEN": "123:abc"}).stdout  # fmt: skip
    assert "is not loopback" not in out
