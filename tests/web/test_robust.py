"""The web console under odd inputs and broken files: a query it does not
expect, a shared wiki it cannot read, a page that fails. Each answer is a page
with the console's headers, never aiohttp's bare 500, and no error's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.memory.page import Page
from bot.soul.loader import BYTES_PER_TOKEN
from bot.types import SHARED
from tests.kit import capture_logs
from tests.web.console import console
from tests.web.test_security import _client, _signed_in

CSP = "Content-Security-Policy"


async def test_days_of_any_digits_fall_back_to_the_default(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        for days in ("²", "٣", "0", "99999999999999999999", "-3", ""):
            async with http.get(c.url + "/usage", params={"days": days}) as answer:
                assert answer.status == 200, days
                assert answer.headers[CSP].startswith("default-src 'none'"), days


@pytest.mark.parametrize(
    ("path", "data", "error"),
    [(".meta/index.json", b"{not json", "ValueError"),
     ("index.md", b"\xff\xfe catalog", "SoulLoadError")],
)  # fmt: skip
async def test_a_shared_wiki_that_cannot_be_read_is_shown_as_such(
    tmp_path: Path, path: str, data: bytes, error: str
) -> None:
    async with console(tmp_path) as c, _client() as http:
        wiki = c.runtime.memory.wiki("lark", SHARED)
        assert wiki is not None
        wiki.write_page(Page.new("topics/ok", body="fine"))
        (wiki.root / path).parent.mkdir(parents=True, exist_ok=True)
        (wiki.root / path).write_bytes(data)
        await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        async with http.get(c.url + "/memory") as answer:
            html = await answer.text()
            assert answer.status == 200 and CSP in answer.headers
        assert f'id="unreadable-lark">This wiki cannot be read now ({error})' in html
        assert "Private memory" in html  # the rest of the page is there
        assert "not valid JSON" not in html and "decode" not in html  # the class only
        assert "topics/ok" not in html  # no half-read wiki


async def test_a_page_that_fails_is_a_500_page_with_the_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with console(tmp_path) as c, _client() as http:
        await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))

        def broken() -> list[object]:
            raise RuntimeError("SECRET-in-the-message")

        monkeypatch.setattr(c.runtime.registry, "all", broken)
        with capture_logs() as logs:
            async with http.get(c.url + "/souls") as answer:
                html = await answer.text()
                assert answer.status == 500
                assert answer.headers[CSP].startswith("default-src 'none'")
                assert answer.headers["Cache-Control"] == "no-store"
        assert "This page failed (RuntimeError)" in html and "SECRET" not in html
        [line] = [line for line in logs if line["event"] == "web.error"]
        assert (line["path"], line["error"]) == ("/souls", "RuntimeError")
        assert "SECRET" not in repr(logs)


async def test_a_backup_over_the_loaders_limit_is_not_diffed(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        path = c.runtime.registry.get("lark").folder / "SOUL.md"  # type: ignore[union-attr]
        backups = path.parent / "memory" / ".meta" / "backups"
        backups.mkdir(parents=True)
        limit = c.runtime.registry.max_prompt_tokens * BYTES_PER_TOKEN
        line = "a big line of an old SOUL.md\n"
        (backups / "SOUL.md.2026-11-01").write_text(line * (limit // len(line) + 1))
        (backups / "SOUL.md.2026-11-02").write_text(path.read_text() + "\na small change\n")
        await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        async with http.get(c.url + "/souls") as answer:
            html = await answer.text()
            assert answer.status == 200
        assert f"too large to show: over the soul loader&#39;s limit of {limit:,} bytes" in html
        assert "a big line" not in html
        assert "-a small change" in html  # the next backup's diff is there
