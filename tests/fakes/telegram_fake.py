"""A fake of the Telegram Bot API on 127.0.0.1 for the real python-telegram-bot (PTB).

Point PTB at it with ``ApplicationBuilder().token(fake.token).base_url(fake.base_url)``
(``fake.base_url == "http://127.0.0.1:<port>/bot"``); PTB then calls
``POST {base_url}{token}/{method}``. To download files add
``.base_file_url(fake.base_file_url)`` (``"http://127.0.0.1:<port>/file/bot"``);
PTB then fetches ``GET {base_file_url}{token}/{file_path}``.

`FakeTelegram` is its parts together, each in a module of its own: the state they
share (tests/fakes/telegram_state.py), the bot's messages
(tests/fakes/telegram_messages.py), voice notes (tests/fakes/telegram_voice.py)
and photos (tests/fakes/telegram_photos.py), what users send and the files in it
(tests/fakes/telegram_users.py), and the webhook (tests/fakes/telegram_webhook_fake.py).
How requests are read and errors answered is in tests/fakes/telegram_http.py,
Telegram's text rules in tests/fakes/telegram_text.py, and what the fake records in
tests/fakes/telegram_records.py.

* Answers: ``{"ok": true, "result": ...}``; errors ``{"ok": false, "error_code": N,
  "description": ...}`` with HTTP status N. Order of a request: token (else 401
  ``Unauthorized``), scripted failures (``fail_next``, ``drop_next``,
  ``conflict_next_polls``), a scripted wait (``hold_next``: a slow answer, the call
  done only once the wait is over, and not at all when the client hangs up first,
  recorded with 499), then the method (unknown: 404 ``Not Found: method not
  found``); method names match case-insensitively. Every request is recorded in
  ``calls`` when it is answered, in that order, with its status; a long poll the
  client gave up on is recorded with 499, a request the fake hung up on
  (``drop_next``: the connection closed with no answer, the call not done) with 444.
* Methods: getMe (``can_read_all_group_messages`` is ``not privacy_mode``: false
  by default, as for a bot in privacy mode; ``can_join_groups`` and
  ``supports_inline_queries`` as set, true and false by default); getUpdates;
  sendMessage; sendMessageDraft; sendDocument; sendPhoto; sendVoice; editMessageText;
  deleteMessage; getFile;
  setWebhook, deleteWebhook and getWebhookInfo; setMyCommands
  (``commands`` keeps the last list, scope ignored) and deleteMyCommands;
  sendChatAction (unknown action: 400); setMyDescription; answerCallbackQuery.
* getUpdates is a long poll like Telegram's: updates with ``update_id < offset`` are
  confirmed and dropped (a negative offset keeps the last ``-offset``); at most
  ``limit`` (1-100) are answered; it waits up to ``timeout`` seconds (0: at once)
  and answers ``[]`` then. ``allowed_updates`` persists across calls and updates
  of other kinds are dropped. A newer getUpdates ends a waiting one with 409
  ``Conflict``, as Telegram does when another process polls with the same token
  (``conflict_next_polls`` scripts that); ``stop()`` ends waiting polls with ``[]``.
  While a webhook is set it answers 409 ``WEBHOOK_CONFLICT`` (Telegram's wording),
  and setting one ends a waiting poll so.

Drive it with ``push_message`` / ``push_update``, script errors with ``fail_next``,
and wait with ``wait_for`` / ``wait_sent``: the waits are woken on every recorded
call, download, post to the webhook and queued update, never polled.

What PTB 22.8 does against it (checked): polling sends getMe, deleteWebhook, then
getUpdates with only ``timeout`` and ``offset`` (no ``limit``, no
``allowed_updates`` unless given); ``updater.stop()`` hangs up the waiting poll
(recorded as 499) and sends one more with ``timeout="0"``. ``reply_to_message_id``
arrives as ``reply_parameters={"message_id": n}``; ``Message.reply_text`` in a
group adds that quote itself, and ``message_thread_id`` in a forum topic. Error
texts reach the caller without ``"Bad Request: "`` and ``str.capitalize()``d
(``BadRequest("Can't parse entities: can't find end tag ...")``); 401 and 404 both
raise InvalidToken (EndPointNotFound from ``do_api_request``). A 5xx raises
``NetworkError`` (the status in its message), a hung-up connection ``NetworkError``
("httpx.RemoteProtocolError: Server disconnected without sending a response."),
409 ``Conflict``; PTB's polling loop retries a Conflict after 1 s, 1.5 s, 2.25 s, ...
and hands each to the updater's ``error_callback``. ``bot.get_file`` prefixes the
``file_path`` with its base file URL; a download past ``read_timeout`` raises
``TimedOut``, a 404 download ``InvalidToken("Not Found")``. ``Message.quote`` is a
``TextQuote``; ``bot.can_read_all_group_messages`` comes from getMe at
``initialize()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.telegram_http import (
    ApiError,
    Failure,
    Handler,
    HangUp,
    Hold,
    float_param,
    int_param,
    json_response,
    read_params,
)
from tests.fakes.telegram_messages import BotMessages
from tests.fakes.telegram_photos import BotPhotos
from tests.fakes.telegram_records import CLIENT_CLOSED, DROPPED, JSON, Call
from tests.fakes.telegram_text import parse_html, utf16_len
from tests.fakes.telegram_users import MAX_DOWNLOAD_BYTES, UserSide, auto_entities
from tests.fakes.telegram_voice import BotVoices
from tests.fakes.telegram_webhook_fake import PUSH_TIMEOUT_S, WebhookSide, free_port

# What tests take from here; some are the parts' (tests/fakes/telegram_*.py).
__all__ = [
    "CLIENT_CLOSED",
    "DROPPED",
    "JSON",
    "MAX_DOWNLOAD_BYTES",
    "FakeTelegram",
    "auto_entities",
    "free_port",
    "parse_html",
    "utf16_len",
]

CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance"
    " is running"
)
WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete"
    " the webhook first"
)
CHAT_ACTIONS = frozenset(
    {"typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice"}
    | {"upload_document", "choose_sticker", "find_location", "record_video_note"}
    | {"upload_video_note"}
)


class FakeTelegram(WebhookSide, BotPhotos, BotVoices, BotMessages, UserSide):
    """The fake server; see the module docstring. Made as `TelegramState` is
    (tests/fakes/telegram_state.py: token, bot id, username, first name,
    ``strict_html``, ``max_upload_bytes``)."""

    # -- lifecycle -------------------------------------------------------------
    async def start(self, port: int = 0) -> None:
        """Serve on 127.0.0.1:``port`` (0: a free port). Raises RuntimeError if running."""
        if self._runner is not None:
            raise RuntimeError("FakeTelegram is already running; stop() it first")
        # Room for the largest upload and its form: aiohttp refuses more than 1 MiB by default.
        app = web.Application(client_max_size=self.max_upload_bytes + 2**20)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._closing = False
        await self._listen(app, port)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S))
        self._pusher = asyncio.create_task(self._push_loop(), name="telegram_fake.pusher")

    async def stop(self) -> None:
        """End waiting long polls with ``[]``, stop posting to the webhook and close
        the server. Idempotent."""
        self._closing = True
        self._notify()
        pusher, self._pusher = self._pusher, None
        if pusher is not None:
            pusher.cancel()
            await asyncio.gather(pusher, return_exceptions=True)
        http, self._http = self._http, None
        if http is not None:
            await http.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("FakeTelegram has no port before start()")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """For ``Bot(base_file_url=...)`` / ``ApplicationBuilder().base_file_url(...)``."""
        return f"http://127.0.0.1:{self.port}/file/bot"

    # -- driving ---------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        status: int,
        description: str,
        *,
        retry_after: int | None = None,
        times: int = 1,
        when: Callable[[JSON], bool] | None = None,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` whose params satisfy ``when``
        with that error (``parameters.retry_after`` when given). Rules apply in order."""
        error = ApiError(status, description, retry_after)
        self._failures.append(Failure(method.lower(), error, times, when))

    def drop_next(
        self, method: str, *, times: int = 1, when: Callable[[JSON], bool] | None = None
    ) -> None:
        """Hang up on the next ``times`` calls of ``method`` whose params satisfy
        ``when``: the connection is closed with no answer and the call is not done
        (a network fault: PTB raises ``NetworkError``). Rules apply in order, with
        ``fail_next``'s."""
        self._failures.append(Failure(method.lower(), None, times, when))

    def hold_next(
        self,
        method: str,
        seconds: float,
        *,
        times: int = 1,
        when: Callable[[JSON], bool] | None = None,
    ) -> None:
        """Hold the next ``times`` calls of ``method`` whose params satisfy ``when``
        ``seconds`` before doing them, as a slow or far server does; ``held`` counts
        the calls waiting now. A client that hangs up first (a timeout, a killed
        process) leaves the call undone, recorded with 499."""
        self._holds.append(Hold(method.lower(), seconds, times, when))

    @property
    def held(self) -> int:
        """How many calls wait on a ``hold_next`` right now."""
        return self._held

    def conflict_next_polls(self, times: int = 1) -> None:
        """Answer the next ``times`` getUpdates with 409 ``Conflict``, as Telegram
        does while another process polls with the same token."""
        self.fail_next("getUpdates", 409, CONFLICT, times=times)

    @property
    def pending_updates(self) -> list[JSON]:
        """The queued updates not yet confirmed by an offset (a fresh list)."""
        return list(self._updates)

    @property
    def waiting_polls(self) -> int:
        """How many getUpdates requests are waiting right now."""
        return self._waiting_polls

    # -- recording and waiting -------------------------------------------------
    def calls_of(self, method: str) -> list[Call]:
        """The recorded calls of ``method`` (case-insensitive), in order."""
        return [c for c in self.calls if c.method.lower() == method.lower()]

    @property
    def sent(self) -> list[JSON]:
        """The params of the successful sendMessage calls, in order."""
        return [c.params for c in self.calls_of("sendMessage") if c.status == 200]

    def bot_messages(self, chat_id: int) -> list[JSON]:
        """The bot's messages in ``chat_id`` as they are now (edits applied, deleted
        ones left out), in the order sent; a message made up for ``reply_to_bot`` is
        among them."""
        return [
            m
            for (chat, _), m in self._messages.items()
            if chat == chat_id and m.get("from", {}).get("id") == self.bot_id
        ]

    async def wait_for(
        self,
        predicate: Callable[[FakeTelegram], bool],
        timeout: float = 10.0,  # noqa: ASYNC109
        *,
        what: str | None = None,
    ) -> None:
        """Wait until ``predicate(self)`` holds, re-checking on every recorded call and
        queued update. Raises TimeoutError naming ``what`` (default: the predicate)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            remaining = deadline - loop.time()
            if remaining <= 0:
                seen = ", ".join(f"{c.method}:{c.status}" for c in self.calls[-10:])
                raise TimeoutError(
                    f"FakeTelegram: waited {timeout:g}s for {what or _describe(predicate)}; "
                    f"last calls: [{seen}]"
                )
            await self._wait_change(remaining)

    async def wait_sent(self, count: int, timeout: float = 10.0) -> list[JSON]:  # noqa: ASYNC109
        """Wait until at least ``count`` successful sendMessage calls; return ``sent``."""
        what = f"{count} successful sendMessage call(s)"
        await self.wait_for(lambda f: len(f.sent) >= count, timeout, what=what)
        return self.sent

    def _record(self, call: Call) -> None:
        self.calls.append(call)
        self._notify()

    # -- the API ---------------------------------------------------------------
    @functools.cached_property
    def _methods(self) -> dict[str, Handler]:
        """The Bot API methods the fake answers, by lower-case name."""
        return {
            "getme": self._get_me,
            "getupdates": self._get_updates,
            "sendmessage": self._send_message,
            "senddocument": self._send_document,
            "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message,
            "sendmessagedraft": self._send_message_draft,
            "getfile": self._get_file,
            "deletewebhook": self._delete_webhook,
            "setwebhook": self._set_webhook,
            "getwebhookinfo": self._get_webhook_info,
            "setmycommands": self._set_my_commands,
            "deletemycommands": self._delete_my_commands,
            "sendchataction": self._send_chat_action,
            "setmydescription": self._ok,
            "answercallbackquery": self._ok,
            "sendvoice": self._send_voice,
            "sendphoto": self._send_photo,
        }

    async def _handle(self, request: web.Request) -> web.Response:
        t = time.monotonic()
        method = request.match_info["method"]
        params: JSON = {}
        try:
            params = await read_params(request)
            result = await self._dispatch(request.match_info["token"], method, params)
        except ApiError as e:
            self._record(Call(method, params, t, e.status))
            return e.response()
        except HangUp:
            self._record(Call(method, params, t, DROPPED))
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never written: the connection is gone
        except asyncio.CancelledError:
            self._record(Call(method, params, t, CLIENT_CLOSED))
            raise
        self._record(Call(method, params, t, 200, result))
        return json_response(200, {"ok": True, "result": result})

    async def _dispatch(self, token: str, method: str, params: JSON) -> Any:
        if token != self.token:
            raise ApiError(401, "Unauthorized")
        for failure in self._failures:
            if failure.method == method.lower() and (failure.when is None or failure.when(params)):
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
                raise failure.error or HangUp()
        handler = self._methods.get(method.lower())
        if handler is None:
            raise ApiError(404, "Not Found: method not found")
        await self._hold(method.lower(), params)
        return await handler(params)

    async def _hold(self, method: str, params: JSON) -> None:
        """Wait as the first ``hold_next`` rule that matches says (none: at once)."""
        for hold in self._holds:
            if hold.method == method and (hold.when is None or hold.when(params)):
                hold.times -= 1
                if hold.times <= 0:
                    self._holds.remove(hold)
                self._held += 1
                self._notify()
                try:
                    await asyncio.sleep(hold.seconds)
                finally:
                    self._held -= 1
                    self._notify()
                return

    async def _ok(self, params: JSON) -> bool:
        return True

    async def _get_me(self, params: JSON) -> JSON:
        return {
            **self.bot_user,
            "can_join_groups": self.can_join_groups,
            "can_read_all_group_messages": not self.privacy_mode,
            "supports_inline_queries": self.supports_inline_queries,
        }

    async def _set_my_commands(self, params: JSON) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise ApiError(400, "Bad Request: can't parse commands JSON object")
        self.commands = commands
        return True

    async def _delete_my_commands(self, params: JSON) -> bool:
        self.commands = []
        return True

    async def _send_chat_action(self, params: JSON) -> bool:
        self._chat(params)
        if params.get("action") not in CHAT_ACTIONS:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _get_updates(self, params: JSON) -> list[JSON]:
        if self.webhook is not None:
            raise ApiError(409, WEBHOOK_CONFLICT)
        offset = int_param(params, "offset", 0) or 0
        limit = min(max(int_param(params, "limit", 100) or 100, 1), 100)
        timeout = max(float_param(params, "timeout"), 0.0)
        allowed = params.get("allowed_updates")
        if isinstance(allowed, list):
            self._allowed = frozenset(allowed) or None
        if offset > 0:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        elif offset < 0:
            self._updates = self._updates[offset:]
        self._polls += 1
        me = self._polls
        deadline = asyncio.get_running_loop().time() + timeout
        self._waiting_polls += 1
        self._notify()
        try:
            while True:
                self._updates = [u for u in self._updates if self._wanted(u)]
                if self._updates or self._closing:
                    return self._updates[:limit]
                if me != self._polls:
                    raise ApiError(409, CONFLICT)
                if self.webhook is not None:
                    raise ApiError(409, WEBHOOK_CONFLICT)
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    return []
                await self._wait_change(remaining)
        finally:
            self._waiting_polls -= 1


def _describe(predicate: Callable[..., Any]) -> str:
    with contextlib.suppress(OSError, TypeError):
        return inspect.getsource(predicate).strip()
    return getattr(predicate, "__qualname__", repr(predicate))
