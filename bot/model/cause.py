"""A failed model call in one line for an operator: what failed and where, in
words (`model unreachable: connection refused at http://127.0.0.1:9 (model.base_url
/ ANTHROPIC_BASE_URL)`), for the chat where the operator reads the reply (the
terminal). The address is shown without credentials, query or fragment; the
client takes its API key out (`ModelClient`)."""

from __future__ import annotations

import errno
import socket
from urllib.parse import urlsplit, urlunsplit

import anthropic

# Where the model's address is set, for a cause that names it.
_BASE_URL_KEY = "model.base_url / ANTHROPIC_BASE_URL"
_NETWORK = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.ETIMEDOUT: "connection timed out",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "network unreachable",
}


def failure_cause(exc: anthropic.APIError, base_url: str, timeout_s: float) -> str:
    """One line for an operator: what failed and where (`model unreachable:
    connection refused at http://127.0.0.1:9 (model.base_url / ANTHROPIC_BASE_URL)`).
    `base_url` is shown without credentials, query or fragment."""
    where = f"at {_shown_url(base_url)} ({_BASE_URL_KEY})"
    if isinstance(exc, anthropic.APITimeoutError):
        return f"model timed out: no answer within {timeout_s:g}s (model.timeout_s) {where}"
    if isinstance(exc, anthropic.APIConnectionError):
        return f"model unreachable: {_network_reason(exc)} {where}"
    if not isinstance(exc, anthropic.APIStatusError):
        return f"model error: {_one_line(str(exc) or type(exc).__name__)}"
    status = exc.status_code
    if status in (401, 403):
        key = "model.api_key / ANTHROPIC_API_KEY"
        return f"model refused the API key (HTTP {status}) {where}: check {key}"
    if status == 429:
        return f"model rate limited (HTTP 429) {where}"
    if status == 529:
        return f"model overloaded (HTTP 529) {where}"
    if status >= 500:
        return f"model server error (HTTP {status}) {where}"
    return f"model refused the request (HTTP {status}): {_one_line(server_reason(exc))}"


def server_reason(exc: anthropic.APIStatusError) -> str:
    """The server's own reason on one line: the ``error.message`` of an Anthropic
    or OpenAI-style body, a ``detail``, or a text body (other servers' shapes);
    else the SDK's wording."""
    body, said = exc.body, exc.message
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        said = str(body["error"].get("message") or said)
    elif isinstance(body, dict) and "detail" in body:
        said = str(body["detail"])
    elif isinstance(body, str) and body.strip():
        said = body.strip()
    return " ".join(said.split())


def _network_reason(exc: BaseException) -> str:
    """Why a connection failed, from the errors that caused `exc` (the first
    with an errno known here: refused, reset, timed out; a name not resolved)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return "host name not found"
        if isinstance(current, OSError) and current.errno in _NETWORK:
            return _NETWORK[current.errno]
        current = current.__cause__ or current.__context__
    return _one_line(str(exc) or type(exc).__name__)


def _shown_url(url: str) -> str:
    """`url` without user, password, query and fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _one_line(text: str, limit: int = 200) -> str:
    """`text` on one line, at most `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
