"""The web console's application: aiohttp, its sign-in routes and its guard.

Every page needs a session (bot/web/auth.py), but the sign-in
pages: `GET /login/<token>` shows a button, and only its POST takes the link, so
a platform's link preview cannot spend it. Every POST carries the session's CSRF
token (`csrf`, a hidden field). Each answer forbids caching, framing and a
Referer (a link's token is in its path). A link or a session is good only while
its admin is one (in `admins:`, or `cli` for `soulbot web-login`): a session of
someone no longer there is ended at its next request. Sign-ins and changes are
logged (`web.login`, `web.login_refused`, `web.change`), never a token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import structlog
from aiohttp import web

from bot.chat.weblogin import COOKIE, Session, WebAuth
from bot.web.events import ModelEvents

if TYPE_CHECKING:
    from bot.app.daemon import Daemon

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SESSION_KEY = web.RequestKey("session", Session)
CONSOLE_KEY: web.AppKey[Console] = web.AppKey("console")
_OPEN = ("/login/", "/login")  # the only paths without a session
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' "
    "data:; form-action 'self'; frame-ancestors 'none'",
}


class Console:
    """What the pages read: the daemon (its runtime, its status), the sign-in, the templates."""

    def __init__(self, daemon: Daemon, auth: WebAuth) -> None:
        self.daemon = daemon
        self.model_events = ModelEvents()
        self.runtime = daemon.runtime
        self.auth = auth
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )

    def render(
        self, request: web.Request, name: str, code: int = 200, **values: Any
    ) -> web.Response:
        """The template `name` as an HTML answer, with the session's CSRF token."""
        session = request.get(SESSION_KEY)
        csrf = session.csrf if session is not None else ""
        text = self._templates.get_template(name).render(csrf=csrf, path=request.path, **values)
        return web.Response(text=text, status=code, content_type="text/html")


def console_of(request: web.Request) -> Console:
    return request.app[CONSOLE_KEY]


def session_of(request: web.Request) -> Session:
    return request[SESSION_KEY]


def changed(request: web.Request, what: str, **details: str) -> None:
    """Log a change made from the console (`web.change`): what, who."""
    log.info("web.change", what=what, by=session_of(request).admin, **details)


NOT_ADMIN = "the admin is no longer in admins:"


def _still_admin(console: Console, admin: str) -> bool:
    """Whether a session's or a link's `admin` (`platform:id`, or `cli`) is an
    admin now: the config's `admins:` may have lost them since the link."""
    if admin == "cli":
        return True
    platform, _, user_id = admin.partition(":")
    return bool(user_id) and console.runtime.access.is_admin(platform, user_id)


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """No page without a session, no POST without its CSRF token; the headers of every answer."""
    console = console_of(request)
    if not request.path.startswith(_OPEN):
        cookie = request.cookies.get(COOKIE)
        session = await console.auth.session(cookie)
        if session is not None and not _still_admin(console, session.admin):
            log.warning("web.login_refused", reason=NOT_ADMIN, admin=session.admin)
            await console.auth.sign_out(cookie or "")
            session = None
        if session is None:
            return _with_headers(console.render(request, "signed_out.html", code=401))
        request[SESSION_KEY] = session
        if request.method == "POST":
            form = await request.post()
            token = form.get("csrf")
            if not session.csrf_ok(token if isinstance(token, str) else None):
                log.warning("web.csrf_refused", path=request.path, by=session.admin)
                return _with_headers(web.Response(status=403, text="CSRF token missing or wrong"))
    try:
        response = await handler(request)
    except web.HTTPException as exc:  # aiohttp's own answers (404, 405): with the headers too
        exc.headers.update(_HEADERS)
        raise
    except Exception as exc:  # a page that fails: a page that says so, with the headers
        log.error("web.error", path=request.path, error=type(exc).__name__)
        lines = [f"This page failed ({type(exc).__name__}); the log has it (web.error)."]
        response = console.render(request, "result.html", code=500, lines=lines)
    return _with_headers(response)


def _with_headers(response: web.StreamResponse) -> web.StreamResponse:
    response.headers.update(_HEADERS)
    return response


async def _login_page(request: web.Request) -> web.StreamResponse:
    return console_of(request).render(request, "login.html", token=request.match_info["token"])


async def _login(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await request.post()
    token = form.get("token")
    taken = await console.auth.sign_in(token) if isinstance(token, str) and token else None
    if taken is None:
        log.warning("web.login_refused", reason="the link is unknown, used or expired")
        return console.render(request, "signed_out.html", code=403, refused=True)
    cookie, session = taken
    if not _still_admin(console, session.admin):
        await console.auth.sign_out(cookie)
        log.warning("web.login_refused", reason=NOT_ADMIN, admin=session.admin)
        return console.render(request, "signed_out.html", code=403, refused=True)
    log.info("web.login", admin=session.admin)
    response = _redirect("/souls")
    response.set_cookie(COOKIE, cookie, httponly=True, samesite="Strict",
                        secure=console.runtime.config.web.secure(), path="/",
                        max_age=int(console.runtime.config.web.session_hours * 3600))  # fmt: skip
    return response


async def _logout(request: web.Request) -> web.StreamResponse:
    await console_of(request).auth.sign_out(request.cookies.get(COOKIE, ""))
    response = _redirect("/login")
    response.del_cookie(COOKIE, path="/")
    return response


async def _signed_out(request: web.Request) -> web.StreamResponse:
    return console_of(request).render(request, "signed_out.html")


async def _home(request: web.Request) -> web.StreamResponse:
    return _redirect("/souls")


def _redirect(path: str) -> web.Response:
    return web.Response(status=303, headers={"Location": path})


def build_app(
    console: Console, routes: Mapping[str, Handler], actions: Mapping[str, Handler]
) -> web.Application:
    """The application: the sign-in routes, `routes` (GET) and `actions` (POST) by path."""
    app = web.Application(middlewares=[_guard], client_max_size=64 * 1024)
    app[CONSOLE_KEY] = console
    app.router.add_get("/", _home)
    app.router.add_get("/login", _signed_out)
    app.router.add_get("/login/{token}", _login_page)
    app.router.add_post("/login", _login)
    app.router.add_post("/logout", _logout)
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    for path, handler in actions.items():
        app.router.add_post(path, handler)
    return app
