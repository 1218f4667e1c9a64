"""`soulbot run` as a process serving Telegram and Discord at once (fakes of
both platforms and of the model in this process), then SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import example_souls


async def read_events(stream: asyncio.StreamReader, events: list[dict[str, Any]],
                      seen: asyncio.Event, wanted: str) -> None:  # fmt: skip
    while line := await stream.readline():
        text = line.decode()
        events.append(json.loads(text) if text.startswith("{") else {"event": text})
        if events[-1].get("event") == wanted:
            seen.set()


async def test_run_serves_both_platforms_and_stops_on_sigterm(tmp_path: Path) -> None:
    example_souls(tmp_path)
    async with FakeTelegram() as tg, FakeDiscord() as dc, FakeAnthropic() as model:
        (tmp_path / "soulbot.yaml").write_text(
            "default_soul: wren\n"
            "model: {max_retries: 0}\n"
            "admins: {telegram: [1], discord: [11]}\n"
            "adapters:\n"
            f"  telegram: {{token: '${{TELEGRAM_TOKEN}}', base_url: '{tg.base_url}'}}\n"
            f"  discord: {{token: '${{DISCORD_TOKEN}}', api_base_url: '{dc.api_base_url}',"
            f" gateway_url: '{dc.gateway_url}'}}\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        env |= {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "test-key",
                "TELEGRAM_TOKEN": tg.token, "DISCORD_TOKEN": "TEST.DISCORD.TOKEN"}  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", "--log-format", "json",
            cwd=tmp_path, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        events: list[dict[str, Any]] = []
        started = asyncio.Event()
        reader = asyncio.create_task(read_events(proc.stderr, events, started, "daemon.started"))
        try:
            async with asyncio.timeout(30):
                await started.wait()
            tg.push_message(1, "hello from telegram", user_id=1)
            dc.push_message(900, "hello from discord", author_id=11)
            [tg_reply] = await tg.wait_sent(1, timeout=20)
            [dc_reply] = await dc.wait_sent(1, timeout=20)
            health = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "health", cwd=tmp_path, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            healthy = (await health.communicate())[0].decode()
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                code = await proc.wait()
                await reader
        finally:
            if proc.returncode is None:
                proc.kill()
    assert code == 0
    assert health.returncode == 0 and healthy.startswith("ok: pid ")
    assert "adapters discord, telegram" in healthy
    assert not (tmp_path / "data" / "health.json").exists()
    assert tg_reply["text"].endswith("hello from telegram")
    assert dc_reply.content.endswith("hello from discord")
    names = [e["event"] for e in events]
    assert names.count("adapter.connected") == 2
    assert names[-1] == "daemon.stopped"
    stderr = json.dumps(events)
    assert tg.token not in stderr and "TEST.DISCORD.TOKEN" not in stderr
