"""A deaf adapter (connected, yet nothing heard from its platform for
`health.deaf_after_s`) fails `soulbot health`; each adapter says when it last
heard from its platform."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import discord
import pytest

from adapters.discord_adapter import DiscordAdapter
from adapters.retry import Backoff
from adapters.telegram_adapter import TelegramAdapter
from bot.app.daemon import Daemon
from bot.app.health import HEALTH_FILE, check_health, write_health
from bot.app.runtime import Runtime
from bot.soul.registry import SoulRegistry
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import RecordingPlatform, delivering, make_config, wait_until

FAST = Backoff(first_s=0.01, max_s=0.02)


def state(connected: bool, last_event: float | None) -> dict[str, object]:
    return {"connected": connected, "last_event": last_event}


def test_a_connected_adapter_silent_past_the_limit_is_deaf(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    now = time.time()
    write_health(path, {"adapters": ["discord", "telegram"], "adapter_state": {
        "telegram": state(True, now - 1000), "discord": state(True, now - 10),
    }})  # fmt: skip
    with pytest.raises(RuntimeError) as deaf:
        check_health(path, now=now, deaf_after_s=900)
    assert str(deaf.value) == "deaf: telegram connected but nothing received for 1000 s"
    assert check_health(path, now=now, deaf_after_s=1200).startswith("ok: pid ")
    assert check_health(path, now=now).startswith("ok: pid ")  # no limit: never deaf


def test_recent_disconnected_and_unseen_adapters_are_not_deaf(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    now = time.time()
    write_health(path, {"adapters": ["a", "b", "c"], "adapter_state": {
        "a": state(True, now - 5), "b": state(False, now - 5000), "c": state(True, None),
    }})  # fmt: skip
    assert check_health(path, now=now, deaf_after_s=900).startswith("ok: pid ")
    write_health(path, {"adapters": ["a"]})  # a file of an older soulbot: nothing to judge
    assert check_health(path, now=now, deaf_after_s=900).startswith("ok: pid ")


def soulbot_health(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
    return subprocess.run([sys.executable, "-m", "bot", "health"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_soulbot_health_fails_deaf_and_passes_when_recent(tmp_path: Path) -> None:
    (tmp_path / "soulbot.yaml").write_text("data_dir: data\nhealth: {deaf_after_s: 600}\n")
    path = tmp_path / "data" / HEALTH_FILE
    write_health(path, {"adapters": ["telegram"],
                        "adapter_state": {"telegram": state(True, time.time() - 700)}})  # fmt: skip
    deaf = soulbot_health(tmp_path)
    assert deaf.returncode == 1
    assert "deaf: telegram connected but nothing received for 70" in deaf.stderr
    write_health(path, {"adapters": ["telegram"],
                        "adapter_state": {"telegram": state(True, time.time() - 30)}})  # fmt: skip
    ok = soulbot_health(tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ok: pid ")


async def test_the_daemon_writes_each_adapters_state(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        registry = SoulRegistry(config.workspaces)
        registry.reload_all()
        platform = RecordingPlatform()
        platform.heard = 1_700_000_000.0
        runtime = await Runtime.open(config, registry, [platform])
        daemon = Daemon(runtime)
        serving = asyncio.create_task(daemon.serve())
        path = config.data_dir / HEALTH_FILE
        await wait_until(path.exists)  # written at once, as the daemon starts
        record = json.loads(path.read_text())
        daemon.request_stop()
        assert await asyncio.wait_for(serving, 30) == 0
    assert record["adapter_state"] == {"test": state(True, 1_700_000_000.0)}


async def test_telegram_hears_an_empty_poll_answered() -> None:
    async with FakeTelegram() as tg:
        adapter = TelegramAdapter(tg.token, tg.base_url, poll_timeout_s=1, backoff=FAST)
        assert adapter.last_seen() is None and not adapter.connected()
        started = time.time()
        async with delivering(adapter):
            first = adapter.last_seen()  # getMe answered
            assert first is not None and first >= started
            assert adapter.connected()
            # No update comes: a long poll that ends empty is Telegram heard from.
            await wait_until(lambda: (adapter.last_seen() or 0) > first, within=10)
            assert any(c.status == 200 for c in tg.calls_of("getUpdates"))
        assert not adapter.connected()


async def test_discord_hears_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    async with FakeDiscord() as dc:
        adapter = DiscordAdapter("TEST.DISCORD.TOKEN", api_base_url=dc.api_base_url,
                                 gateway_url=dc.gateway_url, guild_ready_timeout=0.05,
                                 backoff=FAST)  # fmt: skip
        assert adapter.last_seen() is None and not adapter.connected()
        started = time.time()
        async with delivering(adapter):
            assert adapter.connected()
            seen = adapter.last_seen()
            assert seen is not None and started - 1 <= seen <= time.time() + 1
            # A canary for the private attribute `last_seen` reads (discord.py's keep-alive).
            assert adapter._client is not None
            keep_alive = adapter._client.ws._keep_alive
            assert keep_alive is not None and isinstance(keep_alive._last_recv, float)
        assert not adapter.connected()
