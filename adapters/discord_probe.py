"""Whether a Discord bot may read message content, asked of Discord before the
gateway is (for `soulbot check --online`).

A start without the message content intent fails at the gateway (close 4014,
which the adapter turns into a line naming the Developer Portal switch); this
asks `GET /applications/@me` with the bot token instead and reads the
application's `flags`: GATEWAY_MESSAGE_CONTENT (1 << 18, a verified bot that
Discord approved) or GATEWAY_MESSAGE_CONTENT_LIMITED (1 << 19, an unverified
bot, under 100 servers, with the switch on) mean yes. Plain aiohttp, so a check
does not import discord.py; `api_base_url` points it elsewhere, as the adapter's
does, without touching discord.py's process-wide `Route.BASE`.
"""

from __future__ import annotations

from typing import Any

import aiohttp

API_BASE_URL = "https://discord.com/api/v10"
TIMEOUT_S = 10.0
GATEWAY_MESSAGE_CONTENT = 1 << 18
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19


async def message_content_intent(
    token: str, api_base_url: str | None = None, *, timeout_s: float = TIMEOUT_S
) -> bool | None:
    """True when the bot's application has the message content intent, False
    when it has not, None when Discord cannot tell us: unreachable, slow past
    `timeout_s`, the token refused (401, 403), any answer but a JSON application
    (with no `flags`: none set). Raises nothing."""
    url = (api_base_url or API_BASE_URL).rstrip("/") + "/applications/@me"
    headers = {"Authorization": f"Bot {token}"}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(url, headers=headers) as response,
        ):
            if response.status != 200:
                return None
            application: Any = await response.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None
    if not isinstance(application, dict):
        return None
    flags = application.get("flags", 0)  # Discord may leave out an application's empty flags
    if not isinstance(flags, int) or isinstance(flags, bool):
        return None
    return bool(flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED))
