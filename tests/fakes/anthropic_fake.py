"""A fake of the Anthropic Messages API on 127.0.0.1 for the real ``anthropic`` SDK.

Point ``AsyncAnthropic(api_key=..., base_url=fake.url, max_retries=0)`` at it. It
serves ``POST /v1/messages``, as one JSON message or, with ``"stream": true`` in the
body (``client.messages.stream(...)``, ``create(..., stream=True)``), as events:

* Auth: ``x-api-key`` or ``Authorization: Bearer <key>``, else 401.
* Every parsed request is logged (``fake.log``: body, raw bytes, headers;
  ``fake.requests``: the bodies). A body that is not a JSON object is a 400, one
  over 32 MB a 413 request_too_large; neither is logged.
* Order of a request: log, wait ``latency_s``, auth, outage (``down`` /
  ``fail_until``), validation (model, max_tokens, messages, at most 4 cache
  breakpoints, images), then the reply. Only a request that gets this far consumes
  a reply: first the FIFO script (``script_text``, ``script_tool_use``,
  ``script_error``, ``script_hang``, ``script_gate``: held until the test opens
  it, ``script(Reply.of_stream_error(...))``), then
  ``responder(body)``, then the default ``"echo: <text of the last user message>"``
  (``" [1 image]"``, ``" [2 images]"``, ... appended when it carried images).

Streaming: every error up to the reply (auth, outage, validation, a scripted error)
is the same HTTP error, before any event. Otherwise the answer is ``text/event-stream``,
each event ``event: <type>\\ndata: <json>\\n\\n``: ``message_start`` (the message with
empty content, null stop_reason and the usage of the non-streamed answer with
``output_tokens`` 1), ``ping``, then per content block ``content_block_start``, its
deltas (``text_delta``; ``input_json_delta`` with the tool input's JSON as
``partial_json``), ``content_block_stop``, then ``message_delta`` (``stop_reason``,
``stop_sequence``, ``usage.output_tokens``) and ``message_stop``. Texts and tool JSON
go in chunks of ``stream_chunk_chars`` characters (default 8) with ``stream_delay_s``
(default 0.0, real time) between deltas. ``stream.get_final_message()`` is the Message
the same reply gives non-streamed (content, stop_reason, usage; the max_tokens cut
included). ``Reply.of_stream_error(text, after_chars, error_type)`` fails mid-stream:
it streams the first ``after_chars`` characters of the text, then ``event: error``
with ``{"type": "error", "error": {"type": error_type, "message": ...}}`` and ends.
The SDK raises that from the iterator (and from ``get_final_message``) as a plain
``anthropic.APIStatusError`` with ``status_code`` 200, the HTTP status of the
stream, and ``body`` the error object; not ``OverloadedError``, which needs a 529.
Non-streamed, that reply is the HTTP error of its type (529 for overloaded_error).
As the real API bills a stream's input once it started, a stream failing mid-way
counts as a success for the cache: it reads and writes like the full answer.

Images: a top-level ``{"type": "image", "source": {"type": "base64", "media_type":
M, "data": D}}`` block of a message is checked as the API does, each failure a 400
invalid_request_error naming ``messages.N.content.M``: M one of image/jpeg,
image/png, image/gif, image/webp; D at most 5 MB (5 * 1024 * 1024 characters of
base64), valid base64, and bytes that begin as an image of type M does (its
magic bytes; anything else: "Image does not match the provided media type M",
as the API answers a shell script sent as image/png, or a JPEG as image/png);
at most 100 images in a request. The fake cannot fetch,
so any other source (``url``, ``file``) is a 400 too. Images nested in a tool_result
are not looked at. ``images(body)`` gives a request's images as (media_type, bytes).

Token rule (deterministic, not the real tokenizer): ``tokens(s) = ceil(len(s) / 4)``.
The prompt is the ordered blocks tools, system (a string is one text block), then
each message's content blocks (a string is one text block). A block counts
``tokens(canonical JSON of the block without its cache_control)``, where canonical
JSON is ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``;
an image block instead counts ``image_tokens(data) = min(1600, ceil(len(data) /
1000))`` of its base64 ``data``, about its decoded bytes / 750 (the API's pixels /
750, capped near 1600). A prefix counts the sum of its blocks. Output tokens are
``max(1, tokens(reply text + canonical JSON of the tool input))``.

Prompt cache: a top-level block with ``cache_control`` (``ttl`` "5m", the default,
or "1h") is a breakpoint; a request-level ``cache_control`` marks the last block, as
the API does; blocks nested in a tool_result are not looked at. A prefix's key
hashes the model and, per block, its section (tool/system/user/assistant) and
canonical JSON (an image's data included: another image is another prefix). On a
successful request the hit is the longest live cached prefix ending at a breakpoint
or up to ``lookback_blocks`` blocks before one (20, like the real API; 0 = exact
breakpoints only); it is read and its TTL refreshed. Every breakpoint prefix longer
than the hit with at least ``min_cache_tokens`` tokens is written. ``cache_read`` =
hit tokens, ``cache_creation`` = longest written prefix - ``cache_read``,
``input_tokens`` = total - both. HTTP errors touch no cache. TTLs use the injected
``clock``; latency, hangs and stream delays sleep in real time.

Another server (``compat=Compat(...)``): Ollama, vLLM and LiteLLM's proxy serve
``/v1/messages`` too, with these differences, which the fake then has (see
``Compat``): usage holds ``input_tokens`` and ``output_tokens`` only (no cache
fields); ``cache_control`` is accepted and ignored (no breakpoint limit, nothing
cached, every prompt token is ``input_tokens``); every HTTP error has the body
``Compat.errors`` names, not ``{"type": "error", ...}`` (an error event mid-stream
keeps the Anthropic shape); and tools are refused: ``Compat.tools`` "refuse" answers
a request with ``tools`` a 400 (before it consumes a reply), "ignore" drops
``tools`` and ``tool_choice`` and answers text: a ``tool_use`` reply is answered as
its text, or the default text when it has none.

Standalone: ``python -m tests.fakes.anthropic_fake --port 0 --latency 0.0`` prints
``PORT <n>`` and serves until SIGTERM/SIGINT (``--librarian``: answers compiles as
tests/fakes/librarian.py; ``--demo``: the no-key trial's model, tests/fakes/demo.py;
``--compat [refuse|ignore]`` and ``--compat-errors openai|detail|text``: another
server, as ``Compat``).
Control it over HTTP:
``POST /_fake/script`` (a JSON list of ``Reply.from_json`` objects),
``POST /_fake/config`` (``configure`` keywords; ``compat``: an object of ``Compat``'s
fields, or false), ``GET /_fake/requests`` (the
bodies), ``POST /_fake/reset``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from aiohttp import web

from tests.fakes.server import LoopbackServer

JSON = dict[str, Any]
ReplyKind = Literal["text", "tool_use", "error", "hang", "stream_error"]
ToolsMode = Literal["refuse", "ignore"]
ErrorShape = Literal["openai", "detail", "text"]

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
STATUSES: dict[str, int] = {etype: status for status, etype in ERROR_TYPES.items()}
TTL_S: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
MAX_BREAKPOINTS = 4
MAX_BODY_BYTES = 32 * 1024 * 1024
MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
# How each media type's bytes begin: (offset, bytes) pairs that must all match.
MAGIC: dict[str, tuple[tuple[int, bytes], ...]] = {
    "image/jpeg": ((0, b"\xff\xd8\xff"),),
    "image/png": ((0, b"\x89PNG\r\n\x1a\n"),),
    "image/gif": ((0, b"GIF8"),),
    "image/webp": ((0, b"RIFF"), (8, b"WEBP")),
}
MAX_IMAGE_CHARS = 5 * 1024 * 1024
MAX_IMAGES = 100
MAX_IMAGE_TOKENS = 1600


def canonical(obj: Any) -> str:
    """The canonical JSON text that tokens are counted and cache keys hashed on."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tokens(text: str) -> int:
    """The fake's token count of a text: ceil(len / 4)."""
    return math.ceil(len(text) / 4)


def image_tokens(data: str) -> int:
    """The fake's token count of an image with base64 `data`: ceil(len / 1000), at most 1600."""
    return min(MAX_IMAGE_TOKENS, math.ceil(len(data) / 1000))


def images(body: JSON) -> list[tuple[str, bytes]]:
    """The (media_type, decoded bytes) of the top-level images of a body the fake accepted."""
    return [
        (b["source"]["media_type"], base64.b64decode(b["source"]["data"]))
        for _, b in _image_blocks(body.get("messages") or [])
    ]


def _image_blocks(messages: list[Any]) -> list[tuple[str, JSON]]:
    """The top-level image blocks of `messages`, each with its path ``messages.N.content.M``."""
    return [
        (f"messages.{n}.content.{m}", block)
        for n, message in enumerate(messages)
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for m, block in enumerate(message["content"])
        if isinstance(block, dict) and block.get("type") == "image"
    ]


@dataclass(eq=False)
class Gate:
    """A scripted hang a test ends: ``reached`` is set when its request arrives;
    the default answer goes once ``open()`` is called (or the fake stops)."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    def open(self) -> None:
        self.opened.set()


@dataclass(frozen=True)
class Reply:
    """One scripted answer; build it with the ``of_*`` constructors or ``from_json``."""

    kind: ReplyKind
    text: str | None = None
    tool_name: str = ""
    tool_input: JSON = field(default_factory=dict)
    tool_id: str | None = None
    status: int = 200
    error_type: str = ""
    message: str = ""
    retry_after: float | None = None
    seconds: float = 0.0
    stop_reason: str = "end_turn"  # of a text reply; a text past max_tokens stops there
    after_chars: int = 0  # of a stream_error reply: the characters streamed before the error
    gate: Gate | None = None  # of a hang: it ends when the gate opens (``script_gate``)

    @classmethod
    def of_text(cls, text: str, stop_reason: str = "end_turn") -> Reply:
        """A text answer; `stop_reason` as the API may give it (`refusal`, ...)."""
        return cls("text", text=text, stop_reason=stop_reason)

    @classmethod
    def of_tool_use(
        cls, name: str, input: JSON, tool_id: str | None = None, text: str | None = None
    ) -> Reply:
        return cls("tool_use", text=text, tool_name=name, tool_input=input, tool_id=tool_id)

    @classmethod
    def of_error(
        cls,
        status: int,
        error_type: str | None = None,
        message: str = "scripted error",
        retry_after: float | None = None,
    ) -> Reply:
        etype = error_type or ERROR_TYPES.get(status, "api_error")
        return cls(
            "error", status=status, error_type=etype, message=message, retry_after=retry_after
        )

    @classmethod
    def of_hang(cls, seconds: float) -> Reply:
        return cls("hang", seconds=seconds)

    @classmethod
    def of_stream_error(
        cls,
        text: str,
        after_chars: int,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
    ) -> Reply:
        """Streamed: the first `after_chars` characters of `text`, then an ``error``
        event. Not streamed: the HTTP error of `error_type` (529 for overloaded_error)."""
        status = STATUSES.get(error_type, 500)
        return cls(
            "stream_error",
            text=text,
            after_chars=after_chars,
            status=status,
            error_type=error_type,
            message=message,
        )

    @classmethod
    def from_json(cls, d: JSON) -> Reply:
        """``{"kind": K, **keyword arguments of of_K}``, e.g. ``{"kind": "hang", "seconds": 5}``."""
        args = dict(d)
        kind = args.pop("kind", None)
        if kind not in get_args(ReplyKind):
            raise ValueError(f"unknown reply kind: {kind!r}")
        make: Callable[..., Reply] = getattr(cls, f"of_{kind}")
        return make(**args)


@dataclass(frozen=True)
class Compat:
    """How another server that serves the Messages API differs (module docstring).

    `tools`: "refuse" (a 400 for a request with ``tools``) or "ignore" (text
    answered). `errors`, the body of an HTTP error: "openai" ``{"error": {"message",
    "type", "code"}}`` (``code`` the status as text), "detail" ``{"detail":
    message}``, or "text" (the message as text/plain)."""

    tools: ToolsMode = "refuse"
    errors: ErrorShape = "openai"

    def __post_init__(self) -> None:
        """Raises ValueError for a mode the fake does not know."""
        if self.tools not in get_args(ToolsMode):
            raise ValueError(f"unknown tools mode: {self.tools!r}")
        if self.errors not in get_args(ErrorShape):
            raise ValueError(f"unknown error shape: {self.errors!r}")

    def error_body(self, status: int, error_type: str, message: str) -> tuple[bytes, str]:
        """The body and content type of an HTTP error of this server."""
        if self.errors == "text":
            return message.encode(), "text/plain"
        obj: JSON = {"detail": message}
        if self.errors == "openai":
            obj = {"error": {"message": message, "type": error_type, "code": str(status)}}
        return json.dumps(obj).encode(), "application/json"

    def answer(self, reply: Reply, body: JSON) -> Reply:
        """`reply` as this server gives it: with tools ignored, a tool call is text."""
        if self.tools == "ignore" and reply.kind == "tool_use":
            return Reply.of_text(reply.text or _default_text(body))
        return reply


@dataclass(frozen=True)
class Recorded:
    """One logged request: parsed body, raw bytes and headers (keys as sent)."""

    body: JSON
    raw: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class _Block:
    section: str  # "tool", "system", "user" or "assistant"
    text: str  # canonical JSON without cache_control
    tokens: int
    ttl_s: float | None  # set on a breakpoint


def _prompt_blocks(body: JSON) -> list[_Block]:
    raw: list[tuple[str, Any]] = [("tool", t) for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    raw += [("system", b) for b in system or []]
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        raw += [(str(message.get("role")), b) for b in content or []]
    blocks = []
    for section, block in raw:
        if not isinstance(block, dict):
            block = {"value": block}
        cc = block.get("cache_control")
        ttl = TTL_S.get(cc.get("ttl", "5m"), TTL_S["5m"]) if isinstance(cc, dict) else None
        rest = {k: v for k, v in block.items() if k != "cache_control"}
        text = canonical(rest)
        blocks.append(_Block(section, text, _block_tokens(rest, text), ttl))
    top = body.get("cache_control")  # the API marks the last block itself
    if isinstance(top, dict) and blocks and blocks[-1].ttl_s is None:
        ttl = TTL_S.get(top.get("ttl", "5m"), TTL_S["5m"])
        blocks[-1] = dataclasses.replace(blocks[-1], ttl_s=ttl)
    return blocks


def _block_tokens(block: JSON, text: str) -> int:
    """The tokens of `block`, whose canonical JSON is `text`."""
    source = block.get("source")
    if block.get("type") == "image" and isinstance(source, dict):
        return image_tokens(str(source.get("data", "")))
    return tokens(text)


def _validate(body: JSON, blocks: list[_Block]) -> str | None:
    for key, kind in (("model", str), ("max_tokens", int), ("messages", list)):
        if not isinstance(body.get(key), kind):
            return f"{key}: Field required"
    if not body["messages"]:
        return "messages: at least one message is required"
    found = sum(b.ttl_s is not None for b in blocks)
    if found > MAX_BREAKPOINTS:
        limit = f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided."
        return f"{limit} Found {found}."
    found_images = _image_blocks(body["messages"])
    if len(found_images) > MAX_IMAGES:
        limit = f"messages: A maximum of {MAX_IMAGES} images may be provided."
        return f"{limit} Found {len(found_images)}."
    for path, block in found_images:
        problem = _image_problem(path, block)
        if problem:
            return problem
    return None


def _image_problem(path: str, block: JSON) -> str | None:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if not isinstance(source, dict) or kind != "base64":
        return f"{path}.image.source: the fake takes only base64 images, not {kind!r}"
    if source.get("media_type") not in MEDIA_TYPES:
        allowed = ", ".join(repr(m) for m in MEDIA_TYPES[:-1]) + f" or {MEDIA_TYPES[-1]!r}"
        return f"{path}.image.source.base64.media_type: Input should be {allowed}"
    data = source.get("data")
    if not isinstance(data, str):
        return f"{path}.image.source.base64.data: Input should be a valid string"
    if len(data) > MAX_IMAGE_CHARS:
        return (
            f"{path}.image.source.base64: image exceeds 5 MB maximum:"
            f" {len(data)} bytes > {MAX_IMAGE_CHARS} bytes"
        )
    try:
        decoded = base64.b64decode(data, validate=True)
    except binascii.Error:
        return f"{path}.image.source.base64: invalid base64 data"
    media_type = source["media_type"]
    if not all(decoded[at : at + len(magic)] == magic for at, magic in MAGIC[media_type]):
        mismatch = f"Image does not match the provided media type {media_type}"
        return f"{path}.image.source.base64.data: {mismatch}"
    return None


def _default_text(body: JSON) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, str):
        return "echo: " + content
    blocks = [b for b in content or [] if isinstance(b, dict)]
    if any(b.get("type") == "tool_result" for b in blocks):
        return "echo: tool results received"
    text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    n = sum(b.get("type") == "image" for b in blocks)
    note = f"[{n} image{'s' * (n > 1)}]" if n else ""
    return "echo: " + " ".join(part for part in (text, note) if part)


def _message_events(message: JSON, chunk_chars: int) -> list[JSON]:
    """The real API's events (each carries its ``type``) of a finished `message`, its
    texts and tool input JSON in chunks of `chunk_chars` characters."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**message["usage"], "output_tokens": 1}
    events: list[JSON] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opened, whole = {**block, "text": ""}, block["text"]
            delta_type, key = "text_delta", "text"
        else:
            opened, whole = {**block, "input": {}}, json.dumps(block["input"])
            delta_type, key = "input_json_delta", "partial_json"
        events.append({"type": "content_block_start", "index": index, "content_block": opened})
        for chunk in _chunks(whole, chunk_chars):
            delta = {"type": delta_type, key: chunk}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    events += [{"type": "message_delta", "delta": stop, "usage": usage}, {"type": "message_stop"}]
    return events


def _chunks(text: str, n: int) -> Iterator[str]:
    return (text[i : i + n] for i in range(0, len(text), n))


def _compat(setting: Compat | dict[str, str] | bool) -> Compat | None:
    """`configure`'s ``compat``: a Compat, its fields, True (the defaults) or False (none)."""
    if isinstance(setting, Compat):
        return setting
    if isinstance(setting, dict):
        return Compat(**setting)  # type: ignore[arg-type]
    return Compat() if setting else None


def _json_response(status: int, obj: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(obj).encode(),
        content_type="application/json",
        headers=headers,
    )


class FakeAnthropic(LoopbackServer):
    """The fake server; see the module docstring. All state is plain attributes."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        min_cache_tokens: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        lookback_blocks: int = 20,
        compat: Compat | None = None,
    ) -> None:
        self.latency_s = latency_s
        self.compat = compat
        self.min_cache_tokens = min_cache_tokens
        self.lookback_blocks = lookback_blocks
        self.stream_chunk_chars = 8
        self.stream_delay_s = 0.0
        self.clock = clock
        self.responder: Callable[[JSON], Reply | None] | None = None
        self.log: list[Recorded] = []
        self._script: deque[Reply] = deque()
        self._cache: dict[str, tuple[float, float]] = {}  # key -> (expires_at, ttl_s)
        self._outage_until = -math.inf
        self._outage_status = 529
        self._ids = itertools.count(1)
        self._closing = asyncio.Event()  # set by `stop`: a wait ends at once

    # -- lifecycle -------------------------------------------------------------
    async def start(self, port: int = 0) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/_fake/script", self._ctl_script)
        app.router.add_post("/_fake/config", self._ctl_config)
        app.router.add_get("/_fake/requests", self._ctl_requests)
        app.router.add_post("/_fake/reset", self._ctl_reset)
        self._closing = asyncio.Event()
        await self._listen(app, port)

    async def stop(self) -> None:
        self._closing.set()  # wakes hangs and latency waits
        await super().stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    # -- control (the /_fake/ endpoints call these) ------------------------------
    @property
    def requests(self) -> list[JSON]:
        """The logged bodies, in order (a fresh list each time)."""
        return [r.body for r in self.log]

    def script(self, *replies: Reply) -> None:
        self._script.extend(replies)

    def script_text(self, text: str) -> None:
        self.script(Reply.of_text(text))

    def script_tool_use(
        self, name: str, input: JSON, tool_id: str | None = None, *, text: str | None = None
    ) -> None:
        self.script(Reply.of_tool_use(name, input, tool_id, text))

    def script_error(
        self,
        status: int,
        error_type: str | None = None,
        message: str = "scripted error",
        retry_after: float | None = None,
    ) -> None:
        self.script(Reply.of_error(status, error_type, message, retry_after))

    def script_hang(self, seconds: float) -> None:
        self.script(Reply.of_hang(seconds))

    def script_gate(self) -> Gate:
        """Hold the next request until the test opens the gate returned."""
        gate = Gate()
        self.script(Reply("hang", seconds=math.inf, gate=gate))
        return gate

    def fail_until(self, t: float, status: int = 529) -> None:
        """Answer every request with ``status`` while ``clock() < t``."""
        self._outage_until, self._outage_status = t, status

    @property
    def down(self) -> bool:
        return self.clock() < self._outage_until

    @down.setter
    def down(self, value: bool) -> None:
        self._outage_until = math.inf if value else -math.inf

    def configure(
        self,
        *,
        latency_s: float | None = None,
        down: bool | None = None,
        down_status: int | None = None,
        fail_for_s: float | None = None,
        min_cache_tokens: int | None = None,
        lookback_blocks: int | None = None,
        stream_chunk_chars: int | None = None,
        stream_delay_s: float | None = None,
        compat: Compat | dict[str, str] | bool | None = None,
    ) -> None:
        """Runtime settings; ``fail_for_s`` = ``fail_until(clock() + s, down_status)``;
        ``stream_chunk_chars`` must be at least 1; ``compat``: a Compat, or its
        fields as a dict (True: the defaults), False for the Anthropic API again."""
        if stream_chunk_chars is not None and stream_chunk_chars < 1:
            raise ValueError(f"stream_chunk_chars must be at least 1, not {stream_chunk_chars}")
        if compat is not None:
            self.compat = _compat(compat)
        for name, value in (
            ("latency_s", latency_s),
            ("_outage_status", down_status),
            ("down", down),
            ("min_cache_tokens", min_cache_tokens),
            ("lookback_blocks", lookback_blocks),
            ("stream_chunk_chars", stream_chunk_chars),
            ("stream_delay_s", stream_delay_s),
        ):
            if value is not None:
                setattr(self, name, value)
        if fail_for_s is not None:
            self.fail_until(self.clock() + fail_for_s, self._outage_status)

    def reset(self) -> None:
        """Forget the log, script, cache and outage; keep latency, cache and compat settings."""
        self.log.clear()
        self._script.clear()
        self._cache.clear()
        self._outage_until = -math.inf

    # -- the API ---------------------------------------------------------------
    def _error(
        self, status: int, error_type: str, message: str, retry_after: float | None = None
    ) -> web.Response:
        headers = {"request-id": f"req_fake_{next(self._ids):06d}"}
        if retry_after is not None:
            headers["retry-after"] = format(retry_after, "g")
        if self.compat is not None:
            raw, content_type = self.compat.error_body(status, error_type, message)
            return web.Response(status=status, body=raw, content_type=content_type,
                                headers=headers)  # fmt: skip
        body = {"type": "error", "error": {"type": error_type, "message": message}}
        return _json_response(status, body, headers)

    async def _sleep(self, seconds: float) -> None:
        """Wait `seconds` of real time, or until `stop`: one deadline, no task of its own."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._closing.wait()

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            limit = f"The body must be at most {MAX_BODY_BYTES} bytes."
            return self._error(413, "request_too_large", limit)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self._error(400, "invalid_request_error", "The body must be a JSON object.")
        self.log.append(Recorded(body, raw, dict(request.headers)))
        await self._sleep(self.latency_s)
        auth = request.headers.get("Authorization", "")
        if not request.headers.get("x-api-key") and not (
            auth.startswith("Bearer ") and auth[7:].strip()
        ):
            return self._error(401, "authentication_error", "x-api-key header is required")
        if self.down:
            status = self._outage_status
            return self._error(
                status, ERROR_TYPES.get(status, "api_error"), "Service unavailable (fake outage)"
            )
        blocks = _prompt_blocks(body)
        if self.compat is not None:  # cache_control is ignored
            blocks = [dataclasses.replace(b, ttl_s=None) for b in blocks]
        problem = _validate(body, blocks)
        if problem:
            return self._error(400, "invalid_request_error", problem)
        if self.compat is not None and self.compat.tools == "refuse" and body.get("tools"):
            return self._error(400, "invalid_request_error", "tools are not supported")
        reply = self._script.popleft() if self._script else None
        if reply is None and self.responder is not None:
            reply = self.responder(body)
        if reply is None:
            reply = Reply.of_text(_default_text(body))
        if self.compat is not None:
            reply = self.compat.answer(reply, body)
        if reply.kind == "error":
            return self._error(reply.status, reply.error_type, reply.message, reply.retry_after)
        if reply.kind == "hang" and reply.gate is not None:
            reply.gate.reached.set()
            closing = asyncio.ensure_future(self._closing.wait())
            opened = asyncio.ensure_future(reply.gate.opened.wait())
            await asyncio.wait({closing, opened}, return_when=asyncio.FIRST_COMPLETED)
            closing.cancel()
            opened.cancel()
            reply = Reply.of_text(_default_text(body))
        if reply.kind == "hang":
            await self._sleep(reply.seconds)
            reply = Reply.of_text(_default_text(body))
        if body.get("stream") is True:
            return await self._stream(request, self._events(body, blocks, reply))
        if reply.kind == "stream_error":
            return self._error(reply.status, reply.error_type, reply.message)
        return _json_response(200, self._message(body, blocks, reply))

    def _events(self, body: JSON, blocks: list[_Block], reply: Reply) -> list[JSON]:
        """The events of `reply` streamed. A stream_error reply is answered as its text
        (the same usage and cache), cut after `after_chars` by an error event."""
        if reply.kind != "stream_error":
            return _message_events(self._message(body, blocks, reply), self.stream_chunk_chars)
        message = self._message(body, blocks, Reply.of_text(reply.text or ""))
        text = message["content"][0]["text"][: reply.after_chars]
        events = _message_events(
            {**message, "content": [{"type": "text", "text": text}]}, self.stream_chunk_chars
        )
        error = {"type": "error", "error": {"type": reply.error_type, "message": reply.message}}
        return [*itertools.takewhile(lambda e: e["type"] != "content_block_stop", events), error]

    async def _stream(self, request: web.Request, events: list[JSON]) -> web.StreamResponse:
        """Send `events` as server-sent events, ``stream_delay_s`` between deltas."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        frames = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]
        if self.stream_delay_s <= 0:  # no wait between them: one write, the same events
            await response.write(b"".join(frames))
        else:
            delays = itertools.chain([0.0], itertools.repeat(self.stream_delay_s))
            for event, frame in zip(events, frames, strict=True):
                if event["type"] == "content_block_delta":
                    await self._sleep(next(delays))
                await response.write(frame)
        await response.write_eof()
        return response

    def _message(self, body: JSON, blocks: list[_Block], reply: Reply) -> JSON:
        n = next(self._ids)
        content: list[JSON] = []
        text, stop = reply.text, "tool_use" if reply.kind == "tool_use" else reply.stop_reason
        if text is not None and reply.kind == "text" and tokens(text) > body["max_tokens"]:
            # As the API does: the answer ends where max_tokens runs out.
            text, stop = text[: body["max_tokens"] * 4], "max_tokens"
        if text is not None:
            content.append({"type": "text", "text": text})
        out_text = text or ""
        if reply.kind == "tool_use":
            tool_id = reply.tool_id or f"toolu_fake_{n:06d}"
            content.append(
                {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": reply.tool_name,
                    "input": reply.tool_input,
                }
            )
            out_text += canonical(reply.tool_input)
        usage = self._cache_usage(body["model"], blocks)
        if self.compat is not None:  # no cache fields at all
            usage = {"input_tokens": usage["input_tokens"]}
        usage["output_tokens"] = max(1, tokens(out_text))
        return {
            "id": f"msg_fake_{n:06d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "stop_reason": stop,
            "stop_sequence": None,
            "content": content,
            "usage": usage,
        }

    def _cache_usage(self, model: str, blocks: list[_Block]) -> JSON:
        now = self.clock()
        digest = hashlib.sha256(model.encode())
        keys: list[str] = []
        for b in blocks:
            digest.update(f"\x1e{b.section}\x00{b.text}".encode())
            keys.append(digest.copy().hexdigest())
        cum = list(itertools.accumulate(b.tokens for b in blocks))
        breakpoints = [i for i, b in enumerate(blocks) if b.ttl_s is not None]
        hit = -1
        for bp in breakpoints:
            for i in range(bp, max(bp - self.lookback_blocks, 0) - 1, -1):
                entry = self._cache.get(keys[i])
                if entry is not None and entry[0] > now:
                    hit = max(hit, i)
                    break
        read = 0
        if hit >= 0:
            read = cum[hit]
            ttl = self._cache[keys[hit]][1]
            self._cache[keys[hit]] = (now + ttl, ttl)
        writes = [bp for bp in breakpoints if bp > hit and cum[bp] >= self.min_cache_tokens]
        for bp in writes:
            ttl = blocks[bp].ttl_s or TTL_S["5m"]
            self._cache[keys[bp]] = (now + ttl, ttl)
        creation = cum[writes[-1]] - read if writes else 0
        total = cum[-1] if cum else 0
        return {
            "input_tokens": total - read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
        }

    # -- control endpoints -----------------------------------------------------
    async def _ctl_script(self, request: web.Request) -> web.Response:
        try:
            replies = [Reply.from_json(d) for d in await request.json()]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return _json_response(400, {"ok": False, "error": repr(e)})
        self.script(*replies)
        return _json_response(200, {"ok": True, "queued": len(self._script)})

    async def _ctl_config(self, request: web.Request) -> web.Response:
        try:
            self.configure(**await request.json())
        except (ValueError, TypeError) as e:
            return _json_response(400, {"ok": False, "error": repr(e)})
        return _json_response(200, {"ok": True})

    async def _ctl_requests(self, request: web.Request) -> web.Response:
        return _json_response(200, self.requests)

    async def _ctl_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return _json_response(200, {"ok": True})


async def _serve(
    port: int,
    latency_s: float,
    min_cache_tokens: int,
    librarian: bool,
    demo: bool = False,
    compat: Compat | None = None,
) -> None:
    settings: dict[str, Any] = {
        "latency_s": latency_s,
        "min_cache_tokens": min_cache_tokens,
        "compat": compat,
    }
    if demo:  # the demo answers compiles as the librarian does
        from tests.fakes.demo import DemoAnthropic

        fake: FakeAnthropic = DemoAnthropic(**settings)
    else:
        fake = FakeAnthropic(**settings)
    if librarian and not demo:
        from tests.fakes.librarian import librarian as answer_compiles

        fake.responder = answer_compiles
    await serve_until_signal(fake, port)


async def serve_until_signal(fake: FakeAnthropic, port: int = 0) -> None:
    """Serve `fake` on `port`, print `PORT n`, and stop at SIGTERM or SIGINT
    (the fake as a process of its own: `make fake`, the benchmarks)."""
    await fake.start(port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    print(f"PORT {fake.port}", flush=True)
    await stopping.wait()
    await fake.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fake Anthropic Messages API on 127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--min-cache-tokens", type=int, default=1024)
    parser.add_argument(
        "--librarian",
        action="store_true",
        help="answer soulbot's compile calls as a literal model would (tests/fakes/librarian.py)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the no-key trial's model: short echoes, the librarian's compiles, valid "
        "heartbeat reflections, reported as the free model 'demo' (tests/fakes/demo.py)",
    )
    parser.add_argument(
        "--compat",
        nargs="?",
        const="refuse",
        choices=get_args(ToolsMode),
        help="another server that serves the Messages API (Ollama, vLLM, LiteLLM): no cache "
        "figures, cache_control ignored, its error bodies, and tools refused (a 400, the "
        "default) or ignored (text answered)",
    )
    parser.add_argument(
        "--compat-errors",
        choices=get_args(ErrorShape),
        default="openai",
        help="with --compat: the body of an HTTP error (default: openai)",
    )
    args = parser.parse_args(argv)
    compat = Compat(args.compat, args.compat_errors) if args.compat else None
    asyncio.run(_serve(args.port, args.latency, args.min_cache_tokens, args.librarian,
                       args.demo, compat))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
