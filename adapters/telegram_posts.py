"""The HTTP server Telegram posts updates to (`UpdatePosts`), in place of PTB's.

PTB's webhook server (tornado) reads a whole body, up to tornado's 100 MB, before
it looks at the secret, and keeps a connection that sends nothing for an hour;
anyone who finds the port can fill the memory or the process's descriptors. This
one is tornado too, with the checks in order:

- a post without the `X-Telegram-Bot-Api-Secret-Token` header, with another value
  (compared in constant time), or whose body is not `application/json`: 403, as
  soon as its headers are in, its body never read, the connection closed;
- a body longer than `max_body` (an update is a few kB): 413 when its
  Content-Length says so, before it comes; a chunked one is cut off at the cap
  (400, the connection closed);
- a connection is closed when its headers have not all come `timeout_s` after
  it opened (or after its last request), and when its body has not all come
  `timeout_s` after its headers;
- a body that is not an update: 400.

An update is put on the Application's `update_queue`, and 200 answered: the
Application handles it as a polled one. No line is logged for a refused post (a
scan of the port would fill the log); a body that is no update, which only a
holder of the secret can send, is one `adapter.error` line.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from typing import Any

import structlog
import tornado.web
from telegram import Bot, Update
from tornado.httpserver import HTTPServer

log = structlog.get_logger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@tornado.web.stream_request_body
class _Posts(tornado.web.RequestHandler):
    """One post to the webhook path: checked on its headers (`prepare`), its body
    gathered up to the cap, then queued (`post`). Other methods: 405."""

    def initialize(self, server: UpdatePosts) -> None:
        self._server = server
        self._body = bytearray()

    def prepare(self) -> None:
        server, headers = self._server, self.request.headers
        given = headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, server.secret):
            raise tornado.web.HTTPError(403)
        if headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
            raise tornado.web.HTTPError(403)
        length = headers.get("Content-Length")
        if length is not None and (not length.isdigit() or int(length) > server.max_body):
            raise tornado.web.HTTPError(413)

    def data_received(self, chunk: bytes) -> None:
        self._body += chunk

    async def post(self) -> None:
        server = self._server
        try:
            update = Update.de_json(json.loads(self._body), server.bot)
        except Exception as exc:  # any body that is not an update
            log.warning("adapter.error", adapter="telegram", stage="webhook",
                        error=f"a post that is no update: {type(exc).__name__}")  # fmt: skip
            raise tornado.web.HTTPError(400) from None
        await server.queue.put(update)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The status alone; the connection is closed after it (its body may be
        unread), which the client is told."""
        self.set_header("Connection", "close")
        self.finish()


class _App(tornado.web.Application):
    def log_request(self, handler: tornado.web.RequestHandler) -> None:
        """No access line per request (see the module's docstring)."""


class UpdatePosts:
    """Serves `path` on `host`:`port` from `listen` to `close`, putting each
    update posted with `secret` on `queue` (see the module's docstring)."""

    def __init__(self, bot: Bot, queue: asyncio.Queue[object], *, path: str, secret: str,
                 max_body: int, timeout_s: float) -> None:  # fmt: skip
        self.bot, self.queue = bot, queue
        self.secret = secret.encode()
        self.max_body = max_body
        app = _App([(f"{re.escape(path)}/?", _Posts, {"server": self})])
        # max_body_size cuts a chunked body off; idle_connection_timeout bounds the headers too.
        self._http = HTTPServer(app, max_body_size=max_body, body_timeout=timeout_s,
                                idle_connection_timeout=timeout_s)  # fmt: skip
        self.serving = False

    def listen(self, host: str, port: int) -> None:
        """Take connections on `host`:`port`. Raises OSError (the port taken)."""
        self._http.listen(port, address=host)
        self.serving = True

    async def close(self) -> None:
        """Take no more connections and close the open ones. Idempotent."""
        if not self.serving:
            return
        self.serving = False
        self._http.stop()
        await self._http.close_all_connections()
