"""A fake of the Telegram Bot API on 127.0.0.1 for the real python-telegram-bot (PTB).

Point PTB at it with ``ApplicationBuilder().token(fake.token).base_url(fake.base_url)``
(``fake.base_url == "http://127.0.0.1:<port>/bot"``); PTB then calls
``POST {base_url}{token}/{method}``.

* Requests: parameters come from the query string and from a form-encoded,
  multipart or JSON body (body wins). PTB form-encodes: scalars arrive as strings
  (``chat_id="42"``, ``disable_notification="true"``), lists and objects as JSON
  strings, which the fake parses back (except free-text keys such as ``text``, so a
  text ``"[1]"`` stays a string). Method names match case-insensitively.
* Answers: ``{"ok": true, "result": ...}``; errors ``{"ok": false, "error_code": N,
  "description": ...}`` (plus ``"parameters": {"retry_after": n}`` when set) with
  HTTP status N. Order of a request: token (else 401 ``Unauthorized``), scripted
  failures (``fail_next``, ``drop_next``, ``conflict_next_polls``), then the method
  (unknown: 404 ``Not Found: method not found``). Every request is recorded in
  ``calls`` when it is answered, in that order, with its status; a long poll the
  client gave up on is recorded with 499, a request the fake hung up on
  (``drop_next``: the connection closed with no answer, the call not done) with 444.
* Files: a multipart file part becomes an ``Upload`` (field, file name, media type,
  bytes) in the params; ``attach://<name>`` names another part, as PTB's media
  groups do.
* Methods: getMe; getUpdates; sendMessage; sendDocument; editMessageText;
  deleteWebhook (drops queued updates when ``drop_pending_updates``); setMyCommands
  (``commands`` keeps the last list, scope ignored) and deleteMyCommands;
  sendChatAction (unknown action: 400); setMyDescription; answerCallbackQuery.
* getUpdates is a long poll like Telegram's: updates with ``update_id < offset`` are
  confirmed and dropped (a negative offset keeps the last ``-offset``); at most
  ``limit`` (1-100) are answered; it waits up to ``timeout`` seconds (0: at once)
  and answers ``[]`` then. ``allowed_updates`` persists across calls and updates
  of other kinds are dropped; by default that is every kind except
  ``chat_member``, ``message_reaction`` and ``message_reaction_count``, as on
  Telegram. A newer getUpdates ends a waiting one with 409 ``Conflict``, as Telegram does
  when another process polls with the same token (``conflict_next_polls`` scripts
  that); ``stop()`` ends waiting polls with ``[]``.
* Messages: message ids count up per chat, shared by pushed and sent messages.
  Texts are checked as Telegram does: empty (after trimming) is 400 ``message text
  is empty``, over 4096 UTF-16 code units 400 ``message is too long``. With
  ``parse_mode=HTML`` the text is parsed like Telegram's parser (tags ``HTML_TAGS``,
  entities ``&lt; &gt; &amp; &quot;`` and numeric ones, a stray ``&`` is literal):
  the returned message carries the plain text, and limits apply to it. Invalid
  HTML is 400 ``can't parse entities: ...`` only with ``strict_html=True``;
  otherwise the raw text is kept. A reply (``reply_parameters`` or
  ``reply_to_message_id``) gets ``reply_to_message``: the stored message, or a
  minimal one if the id is unknown. editMessageText refuses unknown messages,
  messages not sent by the bot, and unchanged text, with Telegram's wording.
* sendDocument takes an uploaded file (or the ``file_id`` of one it took before) and
  answers a message with ``document`` (file_id, file_unique_id, file_name, mime_type,
  file_size) and the ``caption``, replies and topics as sendMessage. Refused as
  Telegram does: no document (400 ``there is no document in the request``), an empty
  file (400 ``file must be non-empty``), an unknown file_id (400 ``wrong file
  identifier/HTTP URL specified``), over ``max_upload_bytes`` (50 MB, as Telegram; 413
  ``Request Entity Too Large``), a caption over 1024 UTF-16 code units once parsed
  (400 ``message caption is too long``). Each one taken is in ``documents``.

Drive it with ``push_message`` / ``push_update``, script errors with ``fail_next``,
and wait with ``wait_for`` / ``wait_sent``: the waits are woken on every recorded
call and every queued update, never polled.

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
and hands each to the updater's ``error_callback``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.server import LoopbackServer

JSON = dict[str, Any]
Handler = Callable[[JSON], Awaitable[Any]]

MAX_TEXT_UTF16 = 4096
MAX_CAPTION_UTF16 = 1024
MAX_UPLOAD_BYTES = 50 * 1000 * 1000  # the Bot API's cap on a file a bot sends
CLIENT_CLOSED = 499  # recorded status of a request whose client went away
DROPPED = 444  # recorded status of a request the fake hung up on (nginx's "no response")
CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance"
    " is running"
)
HTML_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code", "pre", "a"}
    | {"tg-spoiler", "tg-emoji", "blockquote", "span"}
)
HTML_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
CHAT_ACTIONS = frozenset(
    {"typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice"}
    | {"upload_document", "choose_sticker", "find_location", "record_video_note"}
    | {"upload_video_note"}
)
DEFAULT_EXCLUDED_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
FREE_TEXT_KEYS = frozenset(
    {"text", "caption", "description", "short_description", "title", "name", "query"}
    | {"question", "explanation", "callback_data", "data", "payload"}
)
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup"
    " are exactly the same as a current content and reply markup of the message"
)

_ENTITY = re.compile(r"&(#x[0-9a-fA-F]+|#[0-9]+|[a-zA-Z]+);")
_TAG_NAME = re.compile(r"[^\s>]*")
_COMMAND = re.compile(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{5,32}\b")


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request: its form field, file name, media type
    and bytes."""

    field: str
    file_name: str
    mime_type: str
    data: bytes = dataclasses.field(repr=False)


@dataclass(frozen=True)
class Document:
    """A document the bot sent (sendDocument): where, as which message, the file
    and the caption as Telegram stored it."""

    chat_id: int
    message_id: int
    file: Upload
    caption: str | None
    file_id: str


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit of Telegram's limits and offsets."""
    return len(text.encode("utf-16-le")) // 2


def _decode_entity(name: str) -> str | None:
    if not name.startswith("#"):
        return HTML_ENTITIES.get(name)
    code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
    if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000:
        return chr(code)
    return None


def _tag_end(text: str, start: int) -> int:
    """Index of the ``>`` closing the tag opened at ``start`` (quotes respected), or -1."""
    quote = ""
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == ">":
            return i
    return -1


def parse_html(text: str) -> str:
    """Parse ``text`` as Telegram's HTML parse mode does and return the plain text.

    Checks only what Telegram's parser checks (supported tags, nesting, closing);
    attribute values are not validated. Raises ValueError with Telegram's wording.
    """
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "&" and (m := _ENTITY.match(text, i)) and (ch := _decode_entity(m[1])):
            out.append(ch)
            i = m.end()
            continue
        if c != "<":
            out.append(c)
            i += 1
            continue
        at = len(text[:i].encode())
        end = _tag_end(text, i)
        if text.startswith("</", i):
            if not stack:
                raise ValueError(f"Unexpected end tag at byte offset {at}")
            if end < 0:
                raise ValueError(f"Unclosed end tag at byte offset {at}")
            name = text[i + 2 : end].strip().lower()
            if name and name != stack[-1]:
                raise ValueError(
                    f'Unmatched end tag at byte offset {at}, expected "</{stack[-1]}>", '
                    f'found "</{name}>"'
                )
            stack.pop()
        else:
            m = _TAG_NAME.match(text, i + 1)
            name = m[0].lower() if m else ""
            if i + 1 + len(name) < len(text) and name not in HTML_TAGS:
                raise ValueError(f'Unsupported start tag "{name}" at byte offset {at}')
            if end < 0:
                raise ValueError(f"Unclosed start tag at byte offset {at}")
            stack.append(name)
        i = end + 1
    if stack:
        raise ValueError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


def auto_entities(text: str) -> list[JSON]:
    """The entities Telegram adds to a plain text: a leading ``/command`` and ``@mentions``."""
    entities: list[JSON] = []
    if m := _COMMAND.match(text):
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(m[0])})
    for m in _MENTION.finditer(text):
        entities.append(
            {"type": "mention", "offset": utf16_len(text[: m.start()]), "length": utf16_len(m[0])}
        )
    return entities


@dataclass(frozen=True)
class Call:
    """One answered request: method as sent, parsed params, monotonic arrival time,
    HTTP status (200, an error status, or 499 if the client went away) and result."""

    method: str
    params: JSON
    t: float
    status: int = 200
    result: Any = None


class ApiError(Exception):
    """An error answer: ``{"ok": false, "error_code": status, "description": ...}``."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(f"{status} {description}")
        self.status = status
        self.description = description
        self.retry_after = retry_after

    def response(self) -> web.Response:
        body: JSON = {"ok": False, "error_code": self.status, "description": self.description}
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return _json_response(self.status, body)


@dataclass
class _Failure:
    method: str
    error: ApiError | None  # None: hang up
    times: int
    when: Callable[[JSON], bool] | None


class _HangUp(Exception):
    """Close the connection without an answer."""


def _json_response(status: int, obj: Any) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(obj).encode(), content_type="application/json"
    )


def _decode(key: str, value: Any) -> Any:
    if isinstance(value, str) and key not in FREE_TEXT_KEYS and value.startswith(("[", "{")):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


async def _read_params(request: web.Request) -> JSON:
    params: JSON = dict(request.query)
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except ValueError as e:
            raise ApiError(400, f"Bad Request: can't parse JSON: {e}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "Bad Request: the JSON body must be an object")
        params.update(body)
    elif request.can_read_body:
        for key, value in (await request.post()).items():
            if isinstance(value, web.FileField):
                params[key] = Upload(key, value.filename, value.content_type, value.file.read())
            else:
                params[key] = value.decode() if isinstance(value, bytes) else value
    return {k: _decode(k, v) for k, v in params.items()}


def _int(params: JSON, key: str, default: int | None = None) -> int | None:
    return _to_int(params.get(key), key, default)


def _to_int(value: Any, key: str, default: int | None = None) -> int | None:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ApiError(400, f"Bad Request: invalid {key} specified") from None


def _float(params: JSON, key: str) -> float:
    try:
        return float(params.get(key) or 0)
    except (TypeError, ValueError):
        raise ApiError(400, f"Bad Request: invalid {key} specified") from None


def _true(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1")


def _kind(update: JSON) -> str:
    return next((k for k in update if k != "update_id"), "")


class FakeTelegram(LoopbackServer):
    """The fake server; see the module docstring."""

    def __init__(
        self,
        token: str = "123456:TEST-TOKEN",
        bot_id: int = 999000,
        username: str = "soul_test_bot",
        first_name: str = "Soul",
        *,
        strict_html: bool = False,
        max_upload_bytes: int = MAX_UPLOAD_BYTES,
    ) -> None:
        self.token = token
        self.max_upload_bytes = max_upload_bytes
        self.bot_id = bot_id
        self.username = username
        self.first_name = first_name
        self.strict_html = strict_html
        self.calls: list[Call] = []
        self.commands: list[JSON] = []
        self.documents: list[Document] = []
        self._updates: list[JSON] = []
        self._next_update_id = 10001
        self._allowed: frozenset[str] | None = None
        self._chats: dict[int, JSON] = {}
        self._messages: dict[tuple[int, int], JSON] = {}
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._failures: list[_Failure] = []
        self._polls = 0  # getUpdates requests issued, to let a newer one end older ones
        self._waiting_polls = 0
        self._changed = asyncio.Event()
        self._closing = False
        self._methods: dict[str, Handler] = {
            "getme": self._get_me,
            "getupdates": self._get_updates,
            "sendmessage": self._send_message,
            "senddocument": self._send_document,
            "editmessagetext": self._edit_message_text,
            "deletewebhook": self._delete_webhook,
            "setmycommands": self._set_my_commands,
            "deletemycommands": self._delete_my_commands,
            "sendchataction": self._send_chat_action,
            "setmydescription": self._ok,
            "answercallbackquery": self._ok,
        }

    # -- lifecycle -------------------------------------------------------------
    async def start(self, port: int = 0) -> None:
        """Serve on 127.0.0.1:``port`` (0: a free port). Raises RuntimeError if running."""
        if self._runner is not None:
            raise RuntimeError("FakeTelegram is already running; stop() it first")
        # Room for the largest upload and its form: aiohttp refuses more than 1 MiB by default.
        app = web.Application(client_max_size=self.max_upload_bytes + 2**20)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._closing = False
        await self._listen(app, port)

    async def stop(self) -> None:
        """End waiting long polls with ``[]`` and close the server. Idempotent."""
        self._closing = True
        self._notify()
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

    # -- driving ---------------------------------------------------------------
    @property
    def bot_user(self) -> JSON:
        """The bot's User object, as getMe answers and sent messages carry in ``from``."""
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.first_name,
            "username": self.username,
        }

    def push_update(self, update: JSON) -> int:
        """Queue a raw update (``update_id`` assigned if missing) and return its id.
        Messages in it are remembered, so the bot can reply to them or edit them."""
        update = dict(update)
        update.setdefault("update_id", self._next_update_id)
        self._next_update_id = max(self._next_update_id, int(update["update_id"]) + 1)
        for key in ("message", "edited_message", "channel_post", "edited_channel_post"):
            message = update.get(key)
            if isinstance(message, dict) and "chat" in message and "message_id" in message:
                self._messages[message["chat"]["id"], message["message_id"]] = message
        self._updates.append(update)
        self._notify()
        return int(update["update_id"])

    def push_message(
        self,
        chat_id: int,
        text: str | None,
        *,
        user_id: int,
        first_name: str = "Ann",
        username: str | None = None,
        chat_type: str = "private",
        message_thread_id: int | None = None,
        is_topic_message: bool = False,
        reply_to_bot: bool = False,
        entities: list[JSON] | None = None,
        extra: JSON | None = None,
    ) -> int:
        """Queue an update with a message from a user and return the message_id.

        A text gets ``entities`` if given, else Telegram's automatic ones (a leading
        ``/command``, ``@mentions``). ``reply_to_bot`` makes it a reply to the bot's
        last message in the chat (one is made up if there is none). ``extra`` is
        merged into the message last (photo, caption, new_chat_members, ...).
        """
        user: JSON = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username is not None:
            user["username"] = username
        chat = self._chats.get(chat_id, {}).copy()
        chat.update(id=chat_id, type=chat_type)
        if chat_type == "private":
            chat.update({k: v for k, v in user.items() if k in ("first_name", "username")})
        else:
            chat.setdefault("title", f"Group {chat_id}")
        if is_topic_message:
            chat["is_forum"] = True
        self._chats[chat_id] = chat
        replied = self._last_bot_message(chat, message_thread_id) if reply_to_bot else None
        message: JSON = {
            "message_id": self._next_message_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": user,
        }
        if message_thread_id is not None:
            message["message_thread_id"] = message_thread_id
        if is_topic_message:
            message["is_topic_message"] = True
        if text is not None:
            message["text"] = text
            found = auto_entities(text) if entities is None else entities
            if found:
                message["entities"] = found
        if replied is not None:
            message["reply_to_message"] = replied
        message.update(extra or {})
        self.push_update({"message": message})
        return int(message["message_id"])

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
        self._failures.append(_Failure(method.lower(), error, times, when))

    def drop_next(
        self, method: str, *, times: int = 1, when: Callable[[JSON], bool] | None = None
    ) -> None:
        """Hang up on the next ``times`` calls of ``method`` whose params satisfy
        ``when``: the connection is closed with no answer and the call is not done
        (a network fault: PTB raises ``NetworkError``). Rules apply in order, with
        ``fail_next``'s."""
        self._failures.append(_Failure(method.lower(), None, times, when))

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

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def _wait_change(self, seconds: float) -> None:
        """Return on the next change, or after ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._changed.wait()

    def _record(self, call: Call) -> None:
        self.calls.append(call)
        self._notify()

    # -- the API ---------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        t = time.monotonic()
        method = request.match_info["method"]
        params: JSON = {}
        try:
            params = await _read_params(request)
            result = await self._dispatch(request.match_info["token"], method, params)
        except ApiError as e:
            self._record(Call(method, params, t, e.status))
            return e.response()
        except _HangUp:
            self._record(Call(method, params, t, DROPPED))
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never written: the connection is gone
        except asyncio.CancelledError:
            self._record(Call(method, params, t, CLIENT_CLOSED))
            raise
        self._record(Call(method, params, t, 200, result))
        return _json_response(200, {"ok": True, "result": result})

    async def _dispatch(self, token: str, method: str, params: JSON) -> Any:
        if token != self.token:
            raise ApiError(401, "Unauthorized")
        for failure in self._failures:
            if failure.method == method.lower() and (failure.when is None or failure.when(params)):
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
                raise failure.error or _HangUp()
        handler = self._methods.get(method.lower())
        if handler is None:
            raise ApiError(404, "Not Found: method not found")
        return await handler(params)

    async def _ok(self, params: JSON) -> bool:
        return True

    async def _get_me(self, params: JSON) -> JSON:
        return {
            **self.bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _delete_webhook(self, params: JSON) -> bool:
        if _true(params.get("drop_pending_updates")):
            self._updates.clear()
        return True

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
        offset = _int(params, "offset", 0) or 0
        limit = min(max(_int(params, "limit", 100) or 100, 1), 100)
        timeout = max(_float(params, "timeout"), 0.0)
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
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    return []
                await self._wait_change(remaining)
        finally:
            self._waiting_polls -= 1

    def _wanted(self, update: JSON) -> bool:
        kind = _kind(update)
        if self._allowed is None:
            return kind not in DEFAULT_EXCLUDED_UPDATES
        return kind in self._allowed

    async def _send_message(self, params: JSON) -> JSON:
        chat = self._chat(params)
        text = self._render(params)
        return self._new_message(chat, params, {"text": text})

    async def _send_document(self, params: JSON) -> JSON:
        chat = self._chat(params)
        document = params.get("document")
        if isinstance(document, str) and document.startswith("attach://"):
            document = params.get(document.removeprefix("attach://"))
        if isinstance(document, str) and document:
            known = next((d for d in self.documents if d.file_id == document), None)
            if known is None:
                raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
            upload = known.file
        elif isinstance(document, Upload):
            upload = document
        else:
            raise ApiError(400, "Bad Request: there is no document in the request")
        if not upload.data:
            raise ApiError(400, "Bad Request: file must be non-empty")
        if len(upload.data) > self.max_upload_bytes:
            raise ApiError(413, "Request Entity Too Large")
        caption = self._caption(params)
        file_id = f"DOC{len(self.documents) + 1:06d}"
        fields: JSON = {
            "document": {
                "file_id": file_id,
                "file_unique_id": f"U{file_id}",
                "file_name": upload.file_name,
                "mime_type": upload.mime_type,
                "file_size": len(upload.data),
            }
        }
        if caption:
            fields["caption"] = caption
        message = self._new_message(chat, params, fields)
        self.documents.append(Document(chat["id"], message["message_id"], upload, caption, file_id))
        return message

    def _new_message(self, chat: JSON, params: JSON, fields: JSON) -> JSON:
        """A message from the bot in `chat` with `fields`, in the topic and
        replying to the message `params` name, stored."""
        message: JSON = {
            "message_id": self._next_message_id(chat["id"]),
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot_user,
            **fields,
        }
        thread = _int(params, "message_thread_id")
        if thread is not None:
            message["message_thread_id"] = thread
            if chat.get("is_forum"):
                message["is_topic_message"] = True
        reply = params.get("reply_parameters")
        replied = reply.get("message_id") if isinstance(reply, dict) else None
        reply_id = _to_int(replied or params.get("reply_to_message_id"), "reply_parameters")
        if reply_id is not None:
            message["reply_to_message"] = self._reply_target(chat, reply_id)
        markup = params.get("reply_markup")
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            message["reply_markup"] = markup
        self._messages[chat["id"], message["message_id"]] = message
        return message

    async def _edit_message_text(self, params: JSON) -> JSON | bool:
        if params.get("inline_message_id"):
            self._render(params)
            return True
        chat = self._chat(params)
        message_id = _int(params, "message_id")
        old = self._messages.get((chat["id"], message_id or 0))
        if old is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if old.get("from", {}).get("id") != self.bot_id:
            raise ApiError(400, "Bad Request: message can't be edited")
        text = self._render(params)
        if text == old.get("text"):
            raise ApiError(400, NOT_MODIFIED)
        new = {**old, "text": text, "edit_date": int(time.time())}
        self._messages[chat["id"], new["message_id"]] = new
        return new

    # -- helpers ---------------------------------------------------------------
    def _render(self, params: JSON) -> str:
        """The text as Telegram would store it, or the ApiError Telegram would answer."""
        text = self._parsed(str(params.get("text") or ""), params)
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise ApiError(400, "Bad Request: message is too long")
        return text

    def _parsed(self, text: str, params: JSON) -> str:
        """`text` as Telegram reads it in the request's `parse_mode` (HTML: its
        tags become entities; bad HTML is an ApiError when `strict_html`)."""
        if str(params.get("parse_mode") or "").upper() == "HTML":
            try:
                return parse_html(text)
            except ValueError as e:
                if self.strict_html:
                    raise ApiError(400, f"Bad Request: can't parse entities: {e}") from None
        return text

    def _caption(self, params: JSON) -> str | None:
        """A document's caption as Telegram would store it (None when there is none)."""
        caption = params.get("caption")
        if caption is None or caption == "":
            return None
        text = self._parsed(str(caption), params)
        if utf16_len(text) > MAX_CAPTION_UTF16:
            raise ApiError(400, "Bad Request: message caption is too long")
        return text

    def _chat(self, params: JSON) -> JSON:
        try:
            chat_id = int(params["chat_id"])
        except (KeyError, TypeError, ValueError):
            raise ApiError(400, "Bad Request: chat not found") from None
        if chat_id not in self._chats:
            chat: JSON = {"id": chat_id, "type": "private", "first_name": "Ann"}
            if chat_id < 0:
                chat = {"id": chat_id, "type": "supergroup", "title": f"Group {chat_id}"}
            self._chats[chat_id] = chat
        return self._chats[chat_id]

    def _next_message_id(self, chat_id: int) -> int:
        return next(self._message_ids.setdefault(chat_id, itertools.count(1)))

    def _reply_target(self, chat: JSON, message_id: int) -> JSON:
        found = self._messages.get((chat["id"], message_id))
        if found is None:
            return {"message_id": message_id, "date": int(time.time()), "chat": chat}
        return {k: v for k, v in found.items() if k != "reply_to_message"}

    def _last_bot_message(self, chat: JSON, thread: int | None) -> JSON:
        for (chat_id, _), message in reversed(self._messages.items()):
            if chat_id == chat["id"] and message.get("from", {}).get("id") == self.bot_id:
                return self._reply_target(chat, message["message_id"])
        made_up: JSON = {
            "message_id": self._next_message_id(chat["id"]),
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot_user,
            "text": "(an earlier message from the bot)",
        }
        if thread is not None:
            made_up["message_thread_id"] = thread
        self._messages[chat["id"], made_up["message_id"]] = made_up
        return made_up


def _describe(predicate: Callable[..., Any]) -> str:
    with contextlib.suppress(OSError, TypeError):
        return inspect.getsource(predicate).strip()
    return getattr(predicate, "__qualname__", repr(predicate))
