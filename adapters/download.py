"""A file downloaded from a platform's file URL, stopped past a byte cap: a
voice note is never read further than the core's limit (`Audio.fetch`)."""

from __future__ import annotations

import aiohttp

_CHUNK = 64 * 1024


async def read_capped(url: str, limit: int) -> bytes:
    """The file at `url`, at most `limit` + 1 bytes of it (more than `limit`
    means it is larger: the download stops there). Raises OSError for an
    answer other than 200, saying its status and never the URL (a Telegram
    file URL holds the bot's token), and aiohttp's errors."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        if response.status != 200:
            raise OSError(f"the file download answered {response.status}")
        data = bytearray()
        async for chunk in response.content.iter_chunked(_CHUNK):
            data += chunk
            if len(data) > limit:
                return bytes(data[: limit + 1])
        return bytes(data)
