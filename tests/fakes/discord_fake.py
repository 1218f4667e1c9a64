"""A fake of Discord's REST API and gateway on 127.0.0.1 for the real ``discord.py``.

One aiohttp server serves the REST API under ``/api/v10`` (``fake.api_base_url``)
and the gateway websocket at ``/gateway`` (``fake.gateway_url``; any query string).
discord.py has no option to point it elsewhere; whoever starts the client sets two
class attributes first (the production adapter does it itself):

* ``discord.http.Route.BASE = fake.api_base_url`` — every REST call, including the
  interaction callbacks and follow-ups: ``discord.webhook.async_`` imports this same
  ``Route`` class, so there is no separate webhook attribute.
* ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)`` —
  the first connection (resumes use READY's ``resume_gateway_url``, which is the same).

`FakeDiscord` is its parts together, each in a module of its own: the state they
share (tests/fakes/discord_state.py), the gateway (tests/fakes/discord_gateway.py,
its connections and sessions in tests/fakes/discord_sessions.py), the REST routes
(tests/fakes/discord_rest.py), the interactions' (tests/fakes/discord_interactions.py)
and voice messages' checks (tests/fakes/discord_voice.py),
and what a test makes happen (tests/fakes/discord_events.py). What the fake records
is in tests/fakes/discord_records.py.

REST: ``Authorization: Bot <token>`` is required (else 401 ``{"message": "401:
Unauthorized", "code": 0}``; discord.py turns that on ``/users/@me`` into
``LoginFailure``), except under ``/interactions/`` and ``/webhooks/`` where the token
is in the path, as on Discord. Order of a request: record it (``fake.requests``),
a scripted hang-up (``drop_next``: the connection closed with no answer, before or
after the route ran; discord.py raises ``aiohttp.ServerDisconnectedError``, except that
aiohttp itself sends an idempotent request, GET, PUT or DELETE, once more first: a
DELETE hung up on after the route then meets 404/10008), auth, a scripted failure
(``fail_next``), then the route. Anything else → 404 ``{"message": "404: Not Found",
"code": 0}``. ``fail_next`` and ``drop_next`` match any route by method and path.
A scripted 429 carries ``retry_after`` in the body and a ``Via`` header: without
``Via`` discord.py takes a 429 for a Cloudflare ban and raises instead of retrying.
discord.py retries 500/502/504 itself after 1 s, 3 s, ...: script those sparingly
(a 503 it raises at once, as ``DiscordServerError``).

Attachments, the bot's uploads and ``push_message(attachments=[FakeFile(...)])``
alike, have ``url`` = ``proxy_url`` on the fake itself, outside ``/api/v10`` and with
no auth, like Discord's CDN: ``http://127.0.0.1:P/attachments/{channel}/{id}/{name}``.
A GET there answers the bytes with their media type, or a 404 (text) for an unknown
one, so discord.py's ``Attachment.read()`` works (it GETs ``url`` with the client's
session). Every GET is recorded as a ``Download`` on arrival; ``hang_downloads(s)``
holds the answers ``s`` seconds, for a client's timeout. A ``FakeFile``'s
``declared_size`` makes the attachment's ``size`` lie; the bytes served stay theirs.

Driving: ``add_guild``, ``add_thread``, ``push_message``, ``push_interaction``,
``delete_message`` (as a moderator: MESSAGE_DELETE sent, later edits 404/10008),
``drop_connection`` (abort the TCP connection without a close frame: discord.py sees
1006 and RESUMEs at once, without backoff), ``invalidate_session`` (both for the
unsharded session, or the ``shard`` given), ``answer_heartbeats``, ``fail_next``,
``drop_next``, ``hang_downloads``, ``slow_answers``. Watching: ``requests`` (each with
the client port it came on), ``dropped`` (the requests hung up on), ``sent`` (as sent:
edits and deletions do not change a ``Sent``), ``edits``, ``deleted``, ``message_text``
(a message's content now, after edits; a deleted one raises), ``downloads``, ``typing``,
``commands``, ``interaction_replies``, ``gateway_received``, ``identified``,
``identify_count``, ``resume_count``, ``heartbeats``, ``shards``, and the ``wait_*``
coroutines, woken on every recorded request, download and gateway frame."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.discord_events import Events
from tests.fakes.discord_interactions import InteractionRoutes
from tests.fakes.discord_records import (
    JSON,
    Download,
    FakeFile,
    InteractionReply,
    Request,
    Sent,
    Upload,
)
from tests.fakes.discord_rest import DEFAULT_ERRORS, Handler, api_error, json_response
from tests.fakes.discord_sessions import guild_id_on_shard
from tests.fakes.discord_state import API_PREFIX, Drop, Failure
from tests.fakes.discord_voice import VoiceMessages

# What tests take from here; some are the parts' (tests/fakes/discord_*.py).
__all__ = ["FakeDiscord", "FakeFile", "InteractionReply", "guild_id_on_shard"]


class FakeDiscord(Events, VoiceMessages, InteractionRoutes):
    """The fake server; see the module docstring. Made as `DiscordState` is
    (tests/fakes/discord_state.py: token, ids, names, flags, shards, heartbeat)."""

    # -- lifecycle ---------------------------------------------------------------
    async def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1 (``port`` 0: any free port). Raises RuntimeError if running."""
        if self._runner is not None:
            raise RuntimeError("FakeDiscord is already started")
        # Room for the largest upload and its form: aiohttp refuses more than 1 MiB by default.
        app = web.Application(client_max_size=self.max_upload_bytes + 2**20)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get(
            r"/attachments/{channel_id:\d+}/{attachment_id:\d+}/{filename}", self._download
        )
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._rest)
        await self._listen(app, port)

    async def stop(self) -> None:
        """Close the websockets (code 1001), then the server. Idempotent."""
        if self._runner is None:
            return
        for conn in list(self._conns):
            conn.close(1001)
        writers = [c.writer for c in self._conns if c.writer is not None]
        if writers:
            await asyncio.wait(writers, timeout=1.0)
        for conn in list(self._conns):
            conn.abort()
        await self._runner.cleanup()
        self._runner = None

    # -- recording and waiting -----------------------------------------------------
    @property
    def sent(self) -> list[Sent]:
        """Messages created by ``POST /channels/{id}/messages``, in order (a fresh list)."""
        return list(self._sent)

    def message_text(self, message_id: int) -> str:
        """The current content of a message the fake knows (pushed, or the bot's),
        after any edits. Raises ValueError for an unknown id, and for a deleted one
        (``"message N was deleted"``)."""
        try:
            return str(self._messages[message_id]["content"])
        except KeyError:
            if any(d.message_id == message_id for d in self.deleted):
                raise ValueError(f"message {message_id} was deleted") from None
            raise ValueError(f"unknown message {message_id}") from None

    async def wait_for(
        self,
        predicate: Callable[[FakeDiscord], bool],
        timeout: float = 10.0,  # noqa: ASYNC109
        what: str = "",
    ) -> None:
        """Return once ``predicate(self)`` holds; it is checked after every change.

        Raises TimeoutError naming ``what`` (or the predicate) after ``timeout`` seconds.
        """
        try:
            async with asyncio.timeout(timeout):  # one deadline, no task per change
                while not predicate(self):
                    await self._changed.wait()
        except TimeoutError:
            name = what or getattr(predicate, "__name__", repr(predicate))
            raise TimeoutError(
                f"FakeDiscord: gave up waiting for {name} after {timeout}s "
                f"({len(self.requests)} requests, {len(self._sent)} sent, "
                f"connected={self.connected})"
            ) from None

    async def wait_sent(self, count: int, timeout: float = 10.0) -> list[Sent]:  # noqa: ASYNC109
        """Wait until ``count`` messages were sent; return all sent so far."""
        await self.wait_for(lambda f: len(f._sent) >= count, timeout, f"{count} sent messages")
        return self.sent

    async def wait_connected(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until a client has identified or resumed and is connected."""
        await self.wait_for(lambda f: f.connected, timeout, "a live gateway connection")

    # -- scripting -----------------------------------------------------------------
    def fail_next(
        self, method: str, path_regex: str, status: int, body: JSON | None = None, times: int = 1
    ) -> None:
        """Answer the next ``times`` requests matching with ``status``.

        ``method`` is an HTTP method or ``"*"``; ``path_regex`` is ``re.search``-ed on
        the path without ``/api/v10``. ``body`` defaults to Discord's usual error for
        the status (403: ``Missing Permissions``/50013). A 429 gets ``retry_after``
        (0.05 s unless the body has one), ``Retry-After``, ``Via`` and
        ``X-RateLimit-*`` headers, so discord.py sleeps and retries.
        """
        self._failures.append(Failure(method.upper(), re.compile(path_regex), status, body, times))

    def drop_next(
        self, method: str, path_regex: str, *, times: int = 1, after: bool = False
    ) -> None:
        """Hang up on the next ``times`` requests matching: close the connection with
        no answer (discord.py raises ``aiohttp.ServerDisconnectedError``; aiohttp
        sends a GET, PUT or DELETE once more first, so drop those ``times=2``). ``after``:
        do the request first, so its effect stays (a message is created) and only its
        answer is lost. A request hung up on meets no ``fail_next`` rule. ``method``
        and ``path_regex`` as in ``fail_next``.
        """
        self._drops.append(Drop(method.upper(), re.compile(path_regex), times, after))

    def hang_downloads(self, seconds: float) -> None:
        """Hold every later attachment download ``seconds`` before answering (0: answer
        at once again). A client that gives up first closes its connection; the fake
        has then recorded the download and answers no one."""
        self._download_delay = seconds

    def slow_answers(self, seconds: float) -> None:
        """Answer every later REST request ``seconds`` after its route ran, as a far
        server does (0: at once again): requests sent together are in flight together."""
        self._answer_delay = seconds

    def _scripted_drop(self, method: str, path: str) -> Drop | None:
        for drop in self._drops:
            if drop.method in ("*", method) and drop.path.search(path):
                drop.remaining -= 1
                if drop.remaining <= 0:
                    self._drops.remove(drop)
                return drop
        return None

    def _hang_up(self, request: web.Request, recorded: Request) -> web.Response:
        self.dropped.append(recorded)
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=500)  # never written: the connection is gone

    def _scripted_failure(self, method: str, path: str) -> web.Response | None:
        for failure in self._failures:
            if failure.method in ("*", method) and failure.path.search(path):
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failures.remove(failure)
                message, code = DEFAULT_ERRORS.get(failure.status, (f"{failure.status}", 0))
                if failure.status != 429:
                    return json_response(
                        failure.status, failure.body or {"message": message, "code": code}
                    )
                body: JSON = {"message": message, "retry_after": 0.05, "global": False}
                body.update(failure.body or {})
                retry_after = float(body["retry_after"])
                headers = {
                    "Via": "1.1 google",
                    "Retry-After": str(math.ceil(retry_after)),
                    "X-RateLimit-Limit": "1",
                    "X-RateLimit-Remaining": "0",
                    "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
                    "X-RateLimit-Reset-After": f"{retry_after:.3f}",
                    "X-RateLimit-Scope": "user",
                }
                if body.get("global"):
                    headers["X-RateLimit-Global"] = "true"
                return json_response(429, body, headers)
        return None

    # -- attachment downloads ------------------------------------------------------------
    async def _download(self, request: web.Request) -> web.Response:
        """``GET /attachments/{channel}/{attachment}/{filename}``: the file's bytes with
        its media type, after any ``hang_downloads`` delay; unknown → 404."""
        info = request.match_info
        channel_id, aid = int(info["channel_id"]), int(info["attachment_id"])
        file = self._files.get((channel_id, aid))
        if file is not None and file.filename != info["filename"]:
            file = None
        download = Download(channel_id, aid, info["filename"], file is not None, time.monotonic())
        self.downloads.append(download)
        self._notify()
        if self._download_delay:
            await asyncio.sleep(self._download_delay)
        if file is None:
            return web.Response(status=404, text="404: Not Found")
        return web.Response(body=file.data, headers={"Content-Type": file.content_type})

    # -- REST ----------------------------------------------------------------------------
    @functools.cached_property
    def _routes(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        """The REST routes: method, path pattern (without ``/api/v10``), handler."""
        return [
            (m, re.compile(p), h)
            for m, p, h in (
                ("GET", r"/users/@me", self._get_me),
                ("GET", r"/oauth2/applications/@me", self._get_application),
                ("GET", r"/applications/@me", self._get_application),
                ("GET", r"/gateway(/bot)?", self._get_gateway),
                ("POST", r"/users/@me/channels", self._create_dm),
                ("GET", r"/channels/(\d+)", self._get_channel),
                ("POST", r"/channels/(\d+)/messages", self._create_message),
                ("GET", r"/channels/(\d+)/messages/(\d+)", self._get_message),
                ("PATCH", r"/channels/(\d+)/messages/(\d+)", self._edit_message),
                ("DELETE", r"/channels/(\d+)/messages/(\d+)", self._delete_message),
                ("POST", r"/channels/(\d+)/typing", self._trigger_typing),
                ("GET", r"/applications/(\d+)(?:/guilds/(\d+))?/commands", self._get_commands),
                ("PUT", r"/applications/(\d+)(?:/guilds/(\d+))?/commands", self._put_commands),
                ("POST", r"/interactions/(\d+)/([^/]+)/callback", self._callback),
                ("POST", r"/webhooks/(\d+)/([^/]+)", self._followup),
                ("GET", r"/webhooks/(\d+)/([^/]+)/messages/(@original|\d+)", self._get_reply),
                ("PATCH", r"/webhooks/(\d+)/([^/]+)/messages/(@original|\d+)", self._edit_reply),
            )
        ]

    async def _rest(self, request: web.Request) -> web.Response:
        path = request.path.removeprefix(API_PREFIX)
        body, files = await self._read_body(request)
        names = tuple(f.filename for f in files)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        recorded = Request(request.method, path, body, time.monotonic(), dict(request.query),
                           names, files, peer[1] if peer else 0)  # fmt: skip
        self.requests.append(recorded)
        self._notify()
        try:
            drop = self._scripted_drop(request.method, path)
            if drop is not None and not drop.after:
                return self._hang_up(request, recorded)
            response = await self._route(request, path, body, files, scripted=drop is None)
            if self._answer_delay:
                await asyncio.sleep(self._answer_delay)
            return response if drop is None else self._hang_up(request, recorded)
        finally:
            self._notify()

    @staticmethod
    async def _read_body(request: web.Request) -> tuple[Any, tuple[Upload, ...]]:
        if not request.can_read_body:
            return None, ()
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            files = tuple(
                Upload(k, v.filename, v.content_type, v.file.read())
                for k, v in form.items()
                if isinstance(v, web.FileField)
            )
            raw = form.get("payload_json")
            return (json.loads(raw) if isinstance(raw, str) else None), files
        text = await request.text()
        try:
            return (json.loads(text) if text else None), ()
        except ValueError:
            return None, ()

    async def _route(
        self,
        request: web.Request,
        path: str,
        body: Any,
        files: tuple[Upload, ...],
        *,
        scripted: bool,
    ) -> web.Response:
        token_in_path = path.startswith(("/interactions/", "/webhooks/"))
        if not token_in_path and request.headers.get("Authorization") != f"Bot {self.token}":
            return api_error(401, "401: Unauthorized", 0)
        failure = self._scripted_failure(request.method, path) if scripted else None
        if failure is not None:
            return failure
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match and method == request.method:
                return await handler(request, match, body, files)
        return api_error(404, "404: Not Found", 0)
