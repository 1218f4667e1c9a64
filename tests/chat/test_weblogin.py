"""The web console's sign-in links and sessions in the store, on both engines."""

from __future__ import annotations

from bot.chat.weblogin import WebAuth
from bot.config.schema import WebConfig
from bot.storage.db import Database


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _token(link: str) -> str:
    return link.rsplit("/", 1)[1]


async def test_a_link_signs_in_once_and_is_kept_only_hashed(db: Database) -> None:
    auth = WebAuth(db, WebConfig(enabled=True), Clock())
    link = await auth.issue_link("telegram:7")
    assert link.startswith("http://127.0.0.1:8080/login/")
    rows = await db.run(lambda conn: conn.execute("SELECT * FROM web_tokens").fetchall())
    assert rows and _token(link) not in repr(rows)
    taken = await auth.sign_in(_token(link))
    assert taken is not None
    cookie, session = taken
    assert session.admin == "telegram:7"
    assert await auth.session(cookie) == session
    assert await auth.sign_in(_token(link)) is None  # used
    rows = await db.run(lambda conn: conn.execute("SELECT * FROM web_tokens").fetchall())
    assert cookie not in repr(rows) and _token(link) not in repr(rows)


async def test_an_expired_link_or_session_is_refused(db: Database) -> None:
    clock = Clock()
    auth = WebAuth(db, WebConfig(enabled=True, link_minutes=10, session_hours=1), clock)
    late = await auth.issue_link("cli")
    clock.now += 601
    assert await auth.sign_in(_token(late)) is None
    taken = await auth.sign_in(_token(await auth.issue_link("cli")))
    assert taken is not None
    clock.now += 3601
    assert await auth.session(taken[0]) is None
    assert await auth.session("not-a-session") is None
    assert await auth.sign_in("not-a-link") is None


async def test_csrf_is_compared_whole(db: Database) -> None:
    auth = WebAuth(db, WebConfig(enabled=True), Clock())
    taken = await auth.sign_in(_token(await auth.issue_link("cli")))
    assert taken is not None
    session = taken[1]
    assert session.csrf_ok(session.csrf)
    assert not session.csrf_ok(None)
    assert not session.csrf_ok("")
    assert not session.csrf_ok(session.csrf[:-1])


def test_links_use_the_public_url_and_https_makes_the_cookie_secure() -> None:
    plain = WebConfig(enabled=True, listen="[::1]:9000")
    assert plain.base_url() == "http://[::1]:9000" and not plain.secure()
    behind = WebConfig(enabled=True, listen="0.0.0.0:8080", public_url="https://bot.example.org/")
    assert behind.base_url() == "https://bot.example.org" and behind.secure()
