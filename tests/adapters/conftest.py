"""What every adapter test shares."""

from __future__ import annotations

import discord
import pytest


@pytest.fixture(autouse=True)
def _restore_discord_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Discord adapter points discord.py's class attributes at the fake; undo it."""
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
