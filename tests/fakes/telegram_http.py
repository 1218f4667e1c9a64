"""How the Bot API fake (tests/fakes/telegram_fake.py) reads a request and answers
an error.

* Requests: parameters come from the query string and from a form-encoded,
  multipart or JSON body (body wins). PTB form-encodes: scalars arrive as strings
  (``chat_id="42"``, ``disable_notification="true"``), lists and objects as JSON
  strings, which the fake parses back (except free-text keys such as ``text``, so a
  text ``"[1]"`` stays a string).
* Uploads: a multipart file part becomes an ``Upload`` (field, file name, media
  type, bytes) in the params; ``attach://<name>`` names another part, as PTB's media
  groups do.
* Errors: an ``ApiError`` answers ``{"ok": false, "error_code": N, "description":
  ...}`` (plus ``"parameters": {"retry_after": n}`` when set) with HTTP status N; a
  ``HangUp`` closes the connection with no answer. A ``Failure`` is a scripted one;
  a ``Hold`` a scripted wait before a call is done.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.telegram_records import JSON, Upload

Handler = Callable[[JSON], Awaitable[Any]]
FREE_TEXT_KEYS = frozenset(
    {"text", "caption", "description", "short_description", "title", "name", "query"}
    | {"question", "explanation", "callback_data", "data", "payload"}
)


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
        return json_response(self.status, body)


@dataclass
class Failure:
    """A scripted answer (``fail_next``, ``drop_next``) to the next ``times`` calls
    of ``method`` whose params satisfy ``when``."""

    method: str
    error: ApiError | None  # None: hang up
    times: int
    when: Callable[[JSON], bool] | None


@dataclass
class Hold:
    """A scripted slow answer (``hold_next``): the next ``times`` calls of
    ``method`` whose params satisfy ``when`` wait ``seconds`` before they are done."""

    method: str
    seconds: float
    times: int
    when: Callable[[JSON], bool] | None


class HangUp(Exception):
    """Close the connection without an answer."""


def json_response(status: int, obj: Any) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(obj).encode(), content_type="application/json"
    )


def _decode(key: str, value: Any) -> Any:
    if isinstance(value, str) and key not in FREE_TEXT_KEYS and value.startswith(("[", "{")):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


async def read_params(request: web.Request) -> JSON:
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


def int_param(params: JSON, key: str, default: int | None = None) -> int | None:
    return to_int(params.get(key), key, default)


def to_int(value: Any, key: str, default: int | None = None) -> int | None:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ApiError(400, f"Bad Request: invalid {key} specified") from None


def float_param(params: JSON, key: str) -> float:
    try:
        return float(params.get(key) or 0)
    except (TypeError, ValueError):
        raise ApiError(400, f"Bad Request: invalid {key} specified") from None


def is_true(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1")
