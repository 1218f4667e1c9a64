"""A fake of the Telegram Bot API on 127.0.0.1 for the real python-telegram-bot (PTB).

Point PTB at it with ``ApplicationBuilder().token(fake.token).base_url(fake.base_url)``
(``fake.base_url == "http://127.0.0.1:<port>/bot"``); PTB then calls
``POST {base_url}{token}/{method}``. To download files add
``.base_file_url(fake.base_file_url)`` (``"http://127.0.0.1:<port>/file/bot"``);
PTB then fetches ``GET {base_file_url}{token}/{file_path}``.

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
* Uploads: a multipart file part becomes an ``Upload`` (field, file name, media
  type, bytes) in the params; ``attach://<name>`` names another part, as PTB's media
  groups do.
* Methods: getMe (``can_read_all_group_messages`` is ``not privacy_mode``: false
  by default, as for a bot in privacy mode; ``can_join_groups`` and
  ``supports_inline_queries`` as set, true and false by default); getUpdates;
  sendMessage; sendMessageDraft; sendDocument; editMessageText; deleteMessage; getFile;
  setWebhook, deleteWebhook and getWebhookInfo (below); setMyCommands
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
  that); ``stop()`` ends waiting polls with ``[]``. While a webhook is set it answers
  409 ``WEBHOOK_CONFLICT`` (Telegram's wording), and setting one ends a waiting poll so.
* Webhooks: setWebhook takes ``url`` (an empty one deletes the webhook, as on Telegram;
  https, or http on loopback since the fake has no TLS, else 400 ``bad webhook: An
  HTTPS URL must be provided for webhook``), ``secret_token`` (1-256 of ``A-Z a-z 0-9 _
  -``, else 400), ``allowed_updates`` (shared with getUpdates), ``max_connections``
  and ``drop_pending_updates``; the webhook is in ``webhook``. deleteWebhook removes it
  and the last error (the updates stay, for getUpdates, unless
  ``drop_pending_updates``). getWebhookInfo answers ``url`` (``""`` with none),
  ``has_custom_certificate`` false, ``pending_update_count``, and with a webhook
  ``max_connections``, ``allowed_updates`` when set, and ``last_error_date`` /
  ``last_error_message`` after a failed post. While a webhook is set, queued updates
  are POSTed to its URL as JSON (``Content-Type: application/json``) with the
  ``X-Telegram-Bot-Api-Secret-Token`` header when a secret was given: oldest first,
  one at a time, the next after the answer. A 2xx answer delivers the update; any
  other answer or a connection failure is an error (``Wrong response from the
  webhook: 403 Forbidden``, ``Connection refused``, ``Read timeout expired``), the
  post is tried ``push_tries`` (3) times in all, ``push_retry_s`` (0.05 s) apart,
  and then the update waits, pending, for the next queued update or setWebhook
  (Telegram's own retries, for minutes, made short). Every post is in ``pushes``.
  ``post_to_webhook`` posts an update to the webhook directly, with the secret a
  test gives (a wrong one, none), and answers the HTTP status. ``free_port()`` picks a
  loopback port for a webhook server under test (PTB's cannot listen on port 0 and
  say which port it got).
* Messages: message ids count up per chat, shared by pushed and sent messages.
  Texts are checked as Telegram does: empty (after trimming) is 400 ``message text
  is empty``, over 4096 UTF-16 code units 400 ``message is too long``. With
  ``parse_mode=HTML`` the text is parsed like Telegram's parser (tags ``HTML_TAGS``,
  entities ``&lt; &gt; &amp; &quot;`` and numeric ones, a stray ``&`` is literal):
  the returned message carries the plain text, and limits apply to it. Invalid
  HTML is 400 ``can't parse entities: ...`` only with ``strict_html=True``;
  otherwise the raw text is kept. Every message pushed or sent is remembered as it
  is now (``bot_messages(chat_id)``: the bot's, edits applied, deleted ones left
  out). A reply
  (``reply_parameters`` or ``reply_to_message_id``) gets ``reply_to_message``: the
  remembered message (without its own ``reply_to_message``, as on Telegram), or a
  minimal one if the id is unknown.
* editMessageText replaces the text and the inline keyboard (none given: removed);
  it refuses unknown messages, messages not sent by the bot, unchanged text and
  keyboard (400 ``message is not modified: ...``) and a text over 4096 (400
  ``MESSAGE_TOO_LONG``, not sendMessage's wording), as Telegram does. Each one taken
  is in ``edits`` with a monotonic time, to check an edit rate.
* deleteMessage answers ``true`` and forgets the message (editing it again is 400
  ``message to edit not found``); each one is in ``deleted`` with a monotonic time.
  An unknown (or already deleted) message is 400 ``message to delete not found``; a
  user's message in a group 400 ``message can't be deleted``, as for a bot that is no
  admin there (in a private chat a bot may delete the user's messages too).
* sendMessageDraft (Bot API 9.3) streams a draft to a private chat the fake knows:
  an unknown chat is 400 ``chat not found``, a group 400 ``TEXTDRAFT_PEER_INVALID``
  (Telegram's answer), ``draft_id`` 0 or missing 400 ``draft_id must be non-zero``
  (the fake's wording). The text is parsed as sendMessage's, may be empty (Telegram
  then shows "Thinking..."), and over 4096 is 400 ``message is too long``. A draft
  makes no message: it is in ``drafts`` with a monotonic time, answered ``true``.
* Files users send: ``add_file`` stores bytes and gives a file_id; ``photo_extra``,
  ``document_extra`` and ``sticker_extra`` build the message fields of a photo (sizes
  smallest first), a document and a sticker as Telegram sends them, to pass as
  ``push_message(extra=...)``. getFile answers ``{file_id, file_unique_id,
  file_size, file_path}`` (unknown id: 400 ``invalid file_id``; over 20 MiB of data:
  400 ``file is too big``, as Telegram); ``file_size`` is the declared size, which a
  test may make differ from the bytes. ``GET /file/bot<token>/<file_path>`` answers
  the bytes (wrong token or unknown path: 404 ``Not Found``); ``hang_downloads``
  holds the next ones to trip a client timeout. Each download is in ``downloads``
  when answered, with its status (499 if the client gave up), not in ``calls``.
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
``initialize()``. ``updater.start_webhook`` sends one setWebhook (``url``,
``max_connections="40"``, and ``secret_token``, ``allowed_updates``,
``drop_pending_updates`` when given) and no deleteWebhook unless dropping; then its
tornado server answers 200 to a post of an update (once queued, before it is
handled), 403 to one with a missing or wrong secret or another content type (not
handled), and 400 to a body that is no update.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import itertools
import json
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from tests.fakes.server import LoopbackServer

JSON = dict[str, Any]
Handler = Callable[[JSON], Awaitable[Any]]

MAX_TEXT_UTF16 = 4096
MAX_CAPTION_UTF16 = 1024
MAX_UPLOAD_BYTES = 50 * 1000 * 1000  # the Bot API's cap on a file a bot sends
MAX_DOWNLOAD_BYTES = 20 * 2**20  # the Bot API's cap on a file a bot fetches (getFile)
THUMBNAIL_SIDES = (90, 320)  # the long side of the smaller sizes Telegram adds to a photo
CLIENT_CLOSED = 499  # recorded status of a request whose client went away
DROPPED = 444  # recorded status of a request the fake hung up on (nginx's "no response")
CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance"
    " is running"
)
WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete"
    " the webhook first"
)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
PUSH_TRIES = 3  # posts of one update before it waits for the next change
PUSH_RETRY_S = 0.05
PUSH_TIMEOUT_S = 5.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
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
EDIT_TOO_LONG = "Bad Request: MESSAGE_TOO_LONG"  # editMessageText's wording, not sendMessage's
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


@dataclass(frozen=True)
class _File:
    """A file users sent, as getFile knows it: ids, download path, bytes and the
    ``file_size`` Telegram announces (which a test may make differ from the bytes)."""

    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes = dataclasses.field(repr=False)
    file_size: int

    def ref(self) -> JSON:
        """The fields every file object in a message carries."""
        return {
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": self.file_size,
        }


@dataclass(frozen=True)
class Download:
    """One answered GET of a file URL: the ``file_path`` asked for, monotonic arrival
    time and HTTP status (200, 404, or 499 if the client gave up, as on a hung one)."""

    file_path: str
    t: float
    status: int


@dataclass(frozen=True)
class Draft:
    """A draft the bot streamed (sendMessageDraft): where, which draft, the text as
    Telegram shows it (parsed) and the monotonic time it was taken."""

    chat_id: int
    draft_id: int
    text: str
    t: float
    message_thread_id: int | None = None


@dataclass(frozen=True)
class Edit:
    """A successful editMessageText of a chat message: which message, its new text
    (parsed) and the monotonic time it was taken."""

    chat_id: int
    message_id: int
    text: str
    t: float


@dataclass(frozen=True)
class Deletion:
    """A successful deleteMessage: which message and the monotonic time it was taken."""

    chat_id: int
    message_id: int
    t: float


@dataclass(frozen=True)
class Webhook:
    """The webhook setWebhook set: where updates are posted, the secret sent with
    each (``""``: none) and ``max_connections``."""

    url: str
    secret_token: str = dataclasses.field(default="", repr=False)
    max_connections: int = 40


@dataclass(frozen=True)
class Push:
    """One post of an update to the webhook: which update, where, the monotonic time,
    the HTTP status (0: no answer) and the error Telegram would record (None: 2xx)."""

    update_id: int
    url: str
    t: float
    status: int
    error: str | None = None


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a webhook server a test starts (PTB's
    cannot listen on port 0 and say which port it got)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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


def _inline_markup(params: JSON) -> JSON | None:
    """The inline keyboard a request attaches (the only markup a message keeps), or None."""
    markup = params.get("reply_markup")
    return markup if isinstance(markup, dict) and "inline_keyboard" in markup else None


def _caption_fields(caption: str | None) -> JSON:
    """A user's ``caption`` with the ``caption_entities`` Telegram adds (none if no caption)."""
    if caption is None:
        return {}
    entities = auto_entities(caption)
    return {"caption": caption, **({"caption_entities": entities} if entities else {})}


def _quote(replied: JSON, quote: str) -> JSON:
    """Telegram's partial quote of ``replied``: the text, its UTF-16 offset in the
    replied text (or caption), chosen by the user. Raises ValueError if not in it."""
    text = str(replied.get("text") or replied.get("caption") or "")
    at = text.find(quote) if quote else -1
    if at < 0:
        raise ValueError(f"quote {quote!r} is not in the replied message {text!r}")
    return {"text": quote, "position": utf16_len(text[:at]), "is_manual": True}


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
        self.downloads: list[Download] = []
        self.drafts: list[Draft] = []
        self.edits: list[Edit] = []
        self.deleted: list[Deletion] = []
        self.privacy_mode = True
        self.webhook: Webhook | None = None
        self.pushes: list[Push] = []
        self.push_tries = PUSH_TRIES
        self.push_retry_s = PUSH_RETRY_S
        self._last_error: tuple[int, str] | None = None  # a failed post: date, message
        self._push_wake = asyncio.Event()  # a queued update or a webhook change
        self._pusher: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self.can_join_groups = True
        self.supports_inline_queries = False
        self._files: dict[str, _File] = {}
        self._hangs: list[float] = []  # seconds each next download is held
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
        }

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
        self._push_wake.set()
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
        reply_to: int | None = None,
        quote: str | None = None,
        entities: list[JSON] | None = None,
        extra: JSON | None = None,
    ) -> int:
        """Queue an update with a message from a user and return the message_id.

        A text gets ``entities`` if given, else Telegram's automatic ones (a leading
        ``/command``, ``@mentions``). ``reply_to_bot`` makes it a reply to the bot's
        last message in the chat (one is made up if there is none); ``reply_to`` a
        reply to that message of the chat, the user's or the bot's, as it is now
        (ValueError if unknown). Either way ``reply_to_message`` is the whole replied
        message, and ``quote`` adds Telegram's partial quote of its text (``quote``
        field: text, UTF-16 ``position``, ``is_manual``; ValueError if not in it).
        ``extra`` is merged into the message last (photo, caption, new_chat_members,
        ...: see ``photo_extra``, ``document_extra``, ``sticker_extra``).
        """
        if reply_to is not None and reply_to_bot:
            raise ValueError("push_message: give reply_to or reply_to_bot, not both")
        if quote is not None and reply_to is None and not reply_to_bot:
            raise ValueError("push_message: a quote needs reply_to or reply_to_bot")
        if reply_to is not None and (chat_id, reply_to) not in self._messages:
            raise ValueError(f"push_message: no message {reply_to} in chat {chat_id}")
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
        if reply_to is not None:
            replied = self._reply_target(chat, reply_to)
        quoted = _quote(replied, quote) if replied is not None and quote is not None else None
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
        if quoted is not None:
            message["quote"] = quoted
        message.update(extra or {})
        self.push_update({"message": message})
        return int(message["message_id"])

    def add_file(self, data: bytes, *, declared_size: int | None = None) -> str:
        """Store a file a user sent and return its file_id. getFile answers it with
        ``file_size`` = ``declared_size`` if given (a test may lie), else ``len(data)``,
        and its ``file_path`` downloads ``data``."""
        n = len(self._files) + 1
        size = len(data) if declared_size is None else declared_size
        file = _File(f"FILE{n:06d}", f"UFILE{n:06d}", f"files/file_{n}", data, size)
        self._files[file.file_id] = file
        return file.file_id

    def photo_extra(
        self,
        data: bytes,
        *,
        width: int = 1280,
        height: int = 960,
        caption: str | None = None,
        declared_size: int | None = None,
    ) -> JSON:
        """Message fields of a photo as Telegram sends it, for ``push_message(extra=)``:
        ``photo``, PhotoSizes smallest first, each an added file: thumbnails with
        ``THUMBNAIL_SIDES`` as the long side and placeholder bytes (``b"thumbnail
        90x67"``), then ``width`` x ``height`` with ``data`` (``declared_size`` as in
        ``add_file``); and ``caption`` with its automatic ``caption_entities``."""
        longest = max(width, height)
        sizes: list[JSON] = []
        for side in (s for s in THUMBNAIL_SIDES if s < longest):
            w, h = max(1, width * side // longest), max(1, height * side // longest)
            sizes.append(self._photo_size(self.add_file(f"thumbnail {w}x{h}".encode()), w, h))
        file_id = self.add_file(data, declared_size=declared_size)
        sizes.append(self._photo_size(file_id, width, height))
        return {"photo": sizes, **_caption_fields(caption)}

    def document_extra(
        self,
        data: bytes,
        *,
        file_name: str = "file.bin",
        mime_type: str = "application/octet-stream",
        caption: str | None = None,
        declared_size: int | None = None,
    ) -> JSON:
        """Message fields of a document a user sent, for ``push_message(extra=)``:
        ``document`` (an added file with ``file_name`` and ``mime_type``;
        ``declared_size`` as in ``add_file``) and ``caption`` as in ``photo_extra``."""
        file = self._files[self.add_file(data, declared_size=declared_size)]
        document = {**file.ref(), "file_name": file_name, "mime_type": mime_type}
        return {"document": document, **_caption_fields(caption)}

    def sticker_extra(
        self, data: bytes, *, emoji: str | None = "🙂", width: int = 512, height: int = 512
    ) -> JSON:
        """Message fields of a static sticker, for ``push_message(extra=)``: ``sticker``
        (an added file; type ``regular``, not animated, not video, with ``emoji``)."""
        file = self._files[self.add_file(data)]
        sticker: JSON = {
            **file.ref(),
            "type": "regular",
            "width": width,
            "height": height,
            "is_animated": False,
            "is_video": False,
        }
        if emoji is not None:
            sticker["emoji"] = emoji
        return {"sticker": sticker}

    def hang_downloads(self, seconds: float, *, times: int = 1) -> None:
        """Hold the next ``times`` file downloads ``seconds`` before answering (``stop()``
        ends the wait), so a client's read timeout fires; one that gives up is in
        ``downloads`` with 499."""
        self._hangs.extend([seconds] * times)

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

    async def post_to_webhook(self, update: JSON, *, secret: str | None) -> int:
        """Post ``update`` to the webhook now, as Telegram would but with ``secret`` in
        the header (None: no header), and answer the HTTP status (0: no answer). Not
        queued, not in ``pushes``. Raises RuntimeError without a webhook."""
        if self.webhook is None:
            raise RuntimeError("post_to_webhook: no webhook is set (setWebhook first)")
        update = {"update_id": self._next_update_id, **update}
        self._next_update_id = max(self._next_update_id, int(update["update_id"]) + 1)
        status, _ = await self._post(self.webhook.url, update, secret)
        return status

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

    def _record_download(self, download: Download) -> None:
        self.downloads.append(download)
        self._notify()

    # -- posting to the webhook ------------------------------------------------
    async def _push_loop(self) -> None:
        """While a webhook is set, post the pending updates to it, oldest first, one
        at a time; an update that fails ``push_tries`` posts waits for the next queued
        update or webhook change. Runs from ``start`` to ``stop``."""
        while True:
            self._push_wake.clear()
            hook = self.webhook
            if hook is not None:
                self._updates = [u for u in self._updates if self._wanted(u)]
            if hook is None or not self._updates or not await self._push(hook, self._updates[0]):
                await self._push_wake.wait()

    async def _push(self, hook: Webhook, update: JSON) -> bool:
        """Post ``update`` until it is taken (True) or ``push_tries`` posts failed, or
        the webhook changed meanwhile (False); each post in ``pushes``."""
        for attempt in range(self.push_tries):
            if attempt:
                await asyncio.sleep(self.push_retry_s)
            if self.webhook is not hook:
                return False
            status, error = await self._post(hook.url, update, hook.secret_token or None)
            self.pushes.append(Push(int(update["update_id"]), hook.url, time.monotonic(),
                                    status, error))  # fmt: skip
            if error is None:
                self._updates = [u for u in self._updates if u is not update]
                self._notify()
                return True
            self._last_error = (int(time.time()), error)
            self._notify()
        return False

    async def _post(self, url: str, update: JSON, secret: str | None) -> tuple[int, str | None]:
        """POST ``update`` as JSON with ``secret`` in the header (None: none); the
        status (0: no answer) and the error Telegram would record (None: a 2xx)."""
        if self._http is None:
            raise RuntimeError("FakeTelegram posts updates only while running")
        headers = {SECRET_HEADER: secret} if secret is not None else {}
        try:
            async with self._http.post(url, json=update, headers=headers) as response:
                await response.read()
        except aiohttp.ClientConnectorError:
            return 0, "Connection refused"
        except TimeoutError:
            return 0, "Read timeout expired"
        except aiohttp.ClientError as e:
            return 0, f"Connection failed: {type(e).__name__}"
        if 200 <= response.status < 300:
            return response.status, None
        return (
            response.status,
            f"Wrong response from the webhook: {response.status} {response.reason}",
        )

    # -- file downloads --------------------------------------------------------
    async def _download(self, request: web.Request) -> web.Response:
        """``GET /file/bot<token>/<file_path>``: the bytes of an added file (after a
        scripted hang), or 404 ``Not Found`` for a wrong token or an unknown path."""
        t = time.monotonic()
        path = request.match_info["path"]
        try:
            await self._hang()
        except asyncio.CancelledError:
            self._record_download(Download(path, t, CLIENT_CLOSED))
            raise
        file = next((f for f in self._files.values() if f.file_path == path), None)
        if request.match_info["token"] != self.token or file is None:
            self._record_download(Download(path, t, 404))
            return ApiError(404, "Not Found").response()
        self._record_download(Download(path, t, 200))
        return web.Response(body=file.data, content_type="application/octet-stream")

    async def _hang(self) -> None:
        """Wait the next scripted hang out, if any (``stop()`` ends it)."""
        if not self._hangs:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._hangs.pop(0)
        while not self._closing and (remaining := deadline - loop.time()) > 0:
            await self._wait_change(remaining)

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
            "can_join_groups": self.can_join_groups,
            "can_read_all_group_messages": not self.privacy_mode,
            "supports_inline_queries": self.supports_inline_queries,
        }

    async def _delete_webhook(self, params: JSON) -> bool:
        if _true(params.get("drop_pending_updates")):
            self._updates.clear()
        self.webhook = None
        self._last_error = None
        self._push_wake.set()
        return True

    async def _set_webhook(self, params: JSON) -> bool:
        """Set the webhook (an empty ``url`` deletes it) and have the pending updates
        posted to it; a set one ends a waiting getUpdates with 409."""
        url = str(params.get("url") or "")
        if not url:
            return await self._delete_webhook(params)
        parts = urlsplit(url)
        if parts.scheme != "https" and not (
            parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS
        ):
            raise ApiError(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        secret = str(params.get("secret_token") or "")
        if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        connections = _int(params, "max_connections", 40) or 40
        if not 1 <= connections <= 100:
            raise ApiError(400, "Bad Request: invalid max_connections specified")
        allowed = params.get("allowed_updates")
        if isinstance(allowed, list):
            self._allowed = frozenset(allowed) or None
        if _true(params.get("drop_pending_updates")):
            self._updates.clear()
        self.webhook = Webhook(url, secret, connections)
        self._push_wake.set()
        self._notify()
        return True

    async def _get_webhook_info(self, params: JSON) -> JSON:
        hook = self.webhook
        info: JSON = {
            "url": hook.url if hook is not None else "",
            "has_custom_certificate": False,
            "pending_update_count": sum(1 for u in self._updates if self._wanted(u)),
        }
        if hook is not None:
            info["max_connections"] = hook.max_connections
            if self._allowed is not None:
                info["allowed_updates"] = sorted(self._allowed)
        if self._last_error is not None:
            info["last_error_date"], info["last_error_message"] = self._last_error
        return info

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
                if self.webhook is not None:
                    raise ApiError(409, WEBHOOK_CONFLICT)
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
        markup = _inline_markup(params)
        if markup is not None:
            message["reply_markup"] = markup
        self._messages[chat["id"], message["message_id"]] = message
        return message

    async def _edit_message_text(self, params: JSON) -> JSON | bool:
        """Replace a bot message's text and inline keyboard (none given: removed), as
        Telegram does, and record it in ``edits``; unchanged text and keyboard is 400
        ``NOT_MODIFIED``."""
        if params.get("inline_message_id"):
            self._render(params, EDIT_TOO_LONG)
            return True
        chat = self._chat(params)
        message_id = _int(params, "message_id") or 0
        old = self._messages.get((chat["id"], message_id))
        if old is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if old.get("from", {}).get("id") != self.bot_id:
            raise ApiError(400, "Bad Request: message can't be edited")
        text = self._render(params, EDIT_TOO_LONG)
        markup = _inline_markup(params)
        if text == old.get("text") and markup == old.get("reply_markup"):
            raise ApiError(400, NOT_MODIFIED)
        new = {k: v for k, v in old.items() if k != "reply_markup"}
        new.update(text=text, edit_date=int(time.time()))
        if markup is not None:
            new["reply_markup"] = markup
        self._messages[chat["id"], message_id] = new
        self.edits.append(Edit(chat["id"], message_id, text, time.monotonic()))
        return new

    async def _delete_message(self, params: JSON) -> bool:
        """Forget a message and record it in ``deleted``: the bot's anywhere, a user's
        only in a private chat (in a group the bot would need to be an admin)."""
        chat = self._chat(params)
        message_id = _int(params, "message_id") or 0
        message = self._messages.get((chat["id"], message_id))
        if message is None:
            raise ApiError(400, "Bad Request: message to delete not found")
        if message.get("from", {}).get("id") != self.bot_id and chat["type"] != "private":
            raise ApiError(400, "Bad Request: message can't be deleted")
        del self._messages[chat["id"], message_id]
        self.deleted.append(Deletion(chat["id"], message_id, time.monotonic()))
        return True

    async def _send_message_draft(self, params: JSON) -> bool:
        """Take a draft for a private chat the fake knows (unknown: 400 ``chat not
        found``; a group: 400 ``TEXTDRAFT_PEER_INVALID``) with a non-zero ``draft_id``;
        the text may be empty (Telegram shows "Thinking...") but not too long. It is
        recorded in ``drafts`` and makes no message."""
        chat = self._chats.get(_int(params, "chat_id") or 0)
        if chat is None:
            raise ApiError(400, "Bad Request: chat not found")
        if chat["type"] != "private":
            raise ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        draft_id = _int(params, "draft_id", 0)
        if not draft_id:
            raise ApiError(400, "Bad Request: draft_id must be non-zero")
        text = self._parsed(str(params.get("text") or ""), params)
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise ApiError(400, "Bad Request: message is too long")
        thread = _int(params, "message_thread_id")
        self.drafts.append(Draft(chat["id"], draft_id, text, time.monotonic(), thread))
        return True

    async def _get_file(self, params: JSON) -> JSON:
        """An added file as a File object with its ``file_path`` (refused over
        ``MAX_DOWNLOAD_BYTES`` of data, as Telegram refuses files over 20 MB)."""
        file = self._files.get(str(params.get("file_id") or ""))
        if file is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        if len(file.data) > MAX_DOWNLOAD_BYTES:
            raise ApiError(400, "Bad Request: file is too big")
        return {**file.ref(), "file_path": file.file_path}

    # -- helpers ---------------------------------------------------------------
    def _render(self, params: JSON, too_long: str = "Bad Request: message is too long") -> str:
        """The text as Telegram would store it, or the ApiError Telegram would answer
        (``too_long``: the method's wording for a text over the limit)."""
        text = self._parsed(str(params.get("text") or ""), params)
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise ApiError(400, too_long)
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

    def _photo_size(self, file_id: str, width: int, height: int) -> JSON:
        return {**self._files[file_id].ref(), "width": width, "height": height}

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
