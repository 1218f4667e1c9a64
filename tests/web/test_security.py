"""The web console's doors, over plain HTTP against a running bot: no page
without a session, a link works once and not late, no change without the
session's CSRF token, and neither a private scope's words nor a secret in any
page."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from bot.chat.weblogin import COOKIE
from bot.config.schema import AdminsConfig
from bot.types import Inbound
from bot.web.service import serving_web
from tests.kit import capture_logs
from tests.web.console import ADMIN, CANARY, SECRETS, console

PAGES = ("/souls", "/memory", "/usage", "/people", "/health", "/usage?days=30")
ACTIONS = ("/souls/reload", "/souls/rollback", "/memory/compile", "/people/approve",
           "/people/deny", "/people/revoke")  # fmt: skip


def _client() -> aiohttp.ClientSession:
    """A client that keeps cookies of an IP address (the console's 127.0.0.1)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def _signed_in(http: aiohttp.ClientSession, base: str, link: str) -> str:
    """Sign in with `link`; returns the CSRF token of the first page."""
    token = link.rsplit("/", 1)[1]
    async with http.get(f"{base}/login/{token}") as answer:
        assert answer.status == 200
        assert COOKIE not in answer.cookies  # showing the button spends nothing
    async with http.post(f"{base}/login", data={"token": token}) as answer:
        assert answer.status == 200 and answer.url.path == "/souls"
        match = re.search(r'name="csrf" value="([^"]+)"', await answer.text())
    assert match is not None
    return match.group(1)


async def test_nothing_without_a_session(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        for path in PAGES:
            async with http.get(c.url + path) as answer:
                assert answer.status == 401, path
                assert "lark" not in await answer.text()
        for path in ACTIONS:
            async with http.post(c.url + path, data={"soul": "lark"}) as answer:
                assert answer.status == 401, path
        http.cookie_jar.update_cookies({COOKIE: "made-up"})
        async with http.get(c.url + "/souls") as answer:
            assert answer.status == 401


async def test_a_link_works_once_and_sets_a_strict_cookie(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        link = await c.runtime.web_login.issue_link("cli")
        with capture_logs() as logs:
            token = link.rsplit("/", 1)[1]
            async with http.post(f"{c.url}/login", data={"token": token},
                                 allow_redirects=False) as answer:  # fmt: skip
                assert answer.status == 303
                cookie = answer.headers["Set-Cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
                assert "Secure" not in cookie  # http on loopback
            async with _client() as other:
                async with other.post(f"{c.url}/login", data={"token": token}) as again:
                    assert again.status == 403
                async with other.get(f"{c.url}/souls") as page:
                    assert page.status == 401
        events = [line["event"] for line in logs]
        assert events.count("web.login") == 1 and events.count("web.login_refused") == 1
        assert token not in repr(logs)


async def test_behind_https_the_cookie_is_secure(tmp_path: Path) -> None:
    async with console(tmp_path, public_url="https://bot.example.org") as c, _client() as http:
        link = await c.runtime.web_login.issue_link("cli")
        assert link.startswith("https://bot.example.org/login/")
        async with http.post(f"{c.url}/login", data={"token": link.rsplit("/", 1)[1]},
                             allow_redirects=False) as answer:  # fmt: skip
            assert answer.status == 303 and "Secure" in answer.headers["Set-Cookie"]


async def test_an_expired_link_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with console(tmp_path) as c, _client() as http:
        link = await c.runtime.web_login.issue_link("cli")
        clock = c.runtime.web_login._clock
        monkeypatch.setattr(c.runtime.web_login, "_clock", lambda: clock() + 11 * 60)
        async with http.post(f"{c.url}/login", data={"token": link.rsplit("/", 1)[1]}) as answer:
            assert answer.status == 403


async def test_a_change_needs_the_sessions_csrf_token(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        csrf = await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        with capture_logs() as logs:
            for data in ({"soul": "lark"}, {"soul": "lark", "csrf": csrf[:-2] + "xx"}):
                for path in ACTIONS:
                    async with http.post(c.url + path, data=data) as answer:
                        assert answer.status == 403, (path, data)
        assert not [line for line in logs if line["event"] == "web.change"]
        with capture_logs() as logs:
            async with http.post(
                c.url + "/souls/reload", data={"soul": "lark", "csrf": csrf}
            ) as ok:
                assert ok.status == 200 and "lark: loaded" in await ok.text()
        assert [(line["what"], line["by"]) for line in logs if line["event"] == "web.change"] == [
            ("soul.reload", "cli")
        ]


async def test_no_private_words_and_no_secret_in_any_page(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        csrf = await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        async with http.post(c.url + "/memory/compile", data={"csrf": csrf}) as answer:
            assert answer.status == 200
        for path in PAGES:
            async with http.get(c.url + path) as answer:
                html = await answer.text()
                assert answer.status == 200, path
                assert answer.headers["Cache-Control"] == "no-store"
                assert CANARY not in html, path
                for secret in SECRETS:
                    assert secret not in html, (path, secret)
        async with http.get(c.url + "/memory") as answer:
            html = await answer.text()
        assert "private-memory" in html or "Private memory" in html


async def test_health_shows_the_models_last_errors_by_class_only(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        csrf = await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        assert csrf
        async with http.get(c.url + "/health") as answer:
            assert "None since the console started" in await answer.text()
        c.fake.down = True
        await c.platform.say("are you there?", user=ADMIN)
        await c.platform.replies(2)
        async with http.get(c.url + "/health") as answer:
            html = await answer.text()
        row = re.search(r'<table id="model-errors">(.*?)</table>', html, re.S)
        assert row is not None and "turn.failed" in row.group(1)
        assert "<td>OverloadedError</td>" in row.group(1)  # the class, not the message


async def test_what_strangers_write_is_shown_as_text(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        await c.platform.say("hi", user="666", name="<script>alert(1)</script>")
        await c.platform.replies(2)  # the pairing code
        await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        async with http.get(c.url + "/people") as answer:
            html = await answer.text()
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html


async def test_a_soul_that_does_not_load_is_listed_and_a_reload_says_why(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        broken = tmp_path / "workspaces" / "broken"
        broken.mkdir()
        (broken / "SOUL.md").write_text("---\nname: [unclosed\n---\nhi\n")
        csrf = await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        async with http.get(c.url + "/souls") as answer:
            html = await answer.text()
        listed = re.search(r'<section id="unloaded">(.*?)</section>', html, re.S)
        assert listed is not None and "<code>broken</code>" in listed.group(1)
        async with http.post(c.url + "/souls/reload", data={"csrf": csrf}) as answer:
            text = await answer.text()
        assert "broken: failed:" in text and "lark: loaded" in text


async def test_a_port_taken_is_one_line_and_the_daemon_serves_on(tmp_path: Path) -> None:
    async with console(tmp_path) as c:  # its console holds web.listen's port already
        with capture_logs() as logs:
            async with serving_web(c.daemon) as runner:
                assert runner is None
        [line] = [line for line in logs if line["event"] == "web.error"]
        assert line["listen"] == c.runtime.config.web.listen


async def test_a_reload_loads_no_folder_outside_the_workspaces(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "SOUL.md").write_text("---\nname: Evil\n---\nI came from outside.\n")
        csrf = await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        for name in (str(outside), "../outside", "/etc", ".."):
            async with http.post(c.url + "/souls/reload", data={"csrf": csrf, "soul": name}) as a:
                assert a.status == 400, name
                assert "no soul or workspace folder is named" in await a.text(), name
        assert [s.id for s in c.runtime.registry.all()] == ["lark"]


async def test_a_double_click_on_roll_back_keeps_the_current_text(tmp_path: Path) -> None:
    async with console(tmp_path) as c, _client() as http:
        path = c.runtime.registry.get("lark").folder / "SOUL.md"  # type: ignore[union-attr]
        text = path.read_text()
        backups = path.parent / "memory" / ".meta" / "backups"
        backups.mkdir(parents=True)
        today = datetime.now(UTC).date()
        (backups / f"SOUL.md.{today}").write_text(text)  # the heartbeat's backup of today
        (backups / f"SOUL.md.{today - timedelta(days=1)}").write_text(text + "\nyesterday\n")
        path.write_text(text + "\nthe current edit\n")
        csrf = await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        form = {"csrf": csrf, "soul": "lark", "day": str(today - timedelta(days=1))}

        async def click() -> int:
            async with http.post(c.url + "/souls/rollback", data=form) as answer:
                return answer.status

        assert await asyncio.gather(click(), click()) == [200, 200]
        assert path.read_text() == text + "\nyesterday\n"
        kept = [p.name for p in backups.iterdir() if "the current edit" in p.read_text()]
        kept = [name for name in kept if "T" in name]  # a rollback's timed backup
        assert len(kept) == 1
        async with http.get(c.url + "/souls") as answer:  # offered, and it rolls back
            assert f'name="day" value="{kept[0].removeprefix("SOUL.md.")}"' in await answer.text()
        form["day"] = kept[0].removeprefix("SOUL.md.")
        assert await click() == 200
        assert path.read_text() == text + "\nthe current edit\n"


async def test_a_session_or_link_of_someone_no_longer_an_admin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with console(tmp_path) as c, _client() as http:
        await _signed_in(http, c.url, await c.runtime.web_login.issue_link(f"telegram:{ADMIN}"))
        kept = await c.runtime.web_login.issue_link(f"telegram:{ADMIN}")
        config = c.runtime.config
        monkeypatch.setattr(c.runtime.access, "_config",
                            config.model_copy(update={"admins": AdminsConfig()}))  # fmt: skip
        with capture_logs() as logs:
            async with http.get(c.url + "/souls") as answer:
                assert answer.status == 401 and "lark" not in await answer.text()
            token = kept.rsplit("/", 1)[1]
            async with (
                _client() as other,
                other.post(
                    c.url + "/login", data={"token": token}, allow_redirects=False
                ) as answer,
            ):
                assert answer.status == 403 and COOKIE not in answer.cookies
        refused = [line for line in logs if line["event"] == "web.login_refused"]
        assert [line["admin"] for line in refused] == [f"telegram:{ADMIN}"] * 2
        assert all("no longer" in line["reason"] for line in refused)
        monkeypatch.setattr(c.runtime.access, "_config", config)  # an admin again:
        async with http.get(c.url + "/souls") as answer:  # the ended session stays ended
            assert answer.status == 401


GROUP_WORD, THREAD_WORD = "GROUP-heron-41", "THREAD-private-93"


async def test_a_groups_wiki_is_shown_and_a_private_threads_is_not(tmp_path: Path) -> None:
    """The two are `chat:` scopes alike; the router noted which is which."""
    async with console(tmp_path) as c, _client() as http:
        group = Inbound("telegram", "-100", "7", "Bo", f"lark, {GROUP_WORD}?", is_dm=False,
                        mentions_bot=True, message_id="g1")  # fmt: skip
        thread = replace(group, user_id="8", text=f"lark, {THREAD_WORD}?", message_id="t1",
                         thread_id="55", private_thread=True)  # fmt: skip
        sent = len(c.platform.sent)
        for inbound in (group, thread):
            await c.platform.hear(inbound)
        await c.platform.replies(sent + 2)
        await c.runtime.memory.drain(10)
        places = c.runtime.router.places
        assert places is not None and await places.groups() == {"chat:telegram:-100"}
        csrf = await _signed_in(http, c.url, await c.runtime.web_login.issue_link("cli"))
        async with http.post(c.url + "/memory/compile", data={"csrf": csrf}) as answer:
            assert answer.status == 200
        async with http.get(c.url + "/memory") as answer:
            html = await answer.text()
    assert "the group wiki chat:telegram:-100" in html and GROUP_WORD in html
    assert THREAD_WORD not in html and "chat:telegram:55" not in html
    assert CANARY not in html
