from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.storage.db import Database

# httpx (inside the SDKs) honours proxy variables; tests talk to 127.0.0.1 only.
os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """An open database in tmp_path, closed after the test."""
    database = Database(tmp_path / "soulbot.db")
    await database.open()
    yield database
    await database.close()
