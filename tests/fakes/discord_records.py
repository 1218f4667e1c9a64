"""What the Discord fake (tests/fakes/discord_fake.py) records, as frozen
dataclasses a test reads: each REST request (`Request`) and the files in it
(`Upload`), the messages the bot sent (`Sent`), edited and deleted, the
attachment downloads, the answers to interactions (`InteractionReply`); and
`FakeFile`, an attachment a test pushes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

JSON = dict[str, Any]
ReplyKind = Literal["callback", "followup", "edit"]


@dataclass(frozen=True)
class Request:
    """One REST request as received; ``path`` has no ``/api/v10`` prefix.

    ``json`` is the JSON body (for multipart, the parsed ``payload_json``) or None;
    ``files`` the uploaded file names, ``uploads`` the files themselves; ``t`` is
    ``time.monotonic()``; ``port`` the client's port of the connection it came on
    (requests with one port came one after another on one kept-alive connection).
    """

    method: str
    path: str
    json: Any
    t: float
    query: Mapping[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    uploads: tuple[Upload, ...] = ()
    port: int = 0


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request: its form field name (``files[0]``),
    file name, media type and bytes."""

    part: str
    filename: str
    content_type: str
    data: bytes = field(repr=False)

    @property
    def index(self) -> int | None:
        """The ``n`` of a ``files[n]`` field, which ``payload_json``'s attachments name."""
        found = re.fullmatch(r"files\[(\d+)\]", self.part)
        return int(found[1]) if found else None


@dataclass(frozen=True)
class Sent:
    """A message the bot created with ``POST /channels/{id}/messages``."""

    channel_id: int
    message_id: int
    content: str
    body: JSON
    files: tuple[Upload, ...] = ()

    @property
    def reply_to(self) -> int | None:
        ref = self.body.get("message_reference") or {}
        return int(ref["message_id"]) if ref.get("message_id") else None


@dataclass(frozen=True)
class Edit:
    """A message edit by ``PATCH /channels/{id}/messages/{id}``: ``content`` is the
    message's text after it, ``body`` the request as sent, ``at`` ``time.monotonic()``."""

    channel_id: int
    message_id: int
    content: str
    body: JSON
    at: float


@dataclass(frozen=True)
class Deletion:
    """A message deleted by ``DELETE /channels/{id}/messages/{id}``; ``at`` is
    ``time.monotonic()``."""

    channel_id: int
    message_id: int
    at: float


@dataclass(frozen=True)
class FakeFile:
    """An attachment for ``push_message``, served at its ``url`` with these bytes.

    ``declared_size`` is the ``size`` the message claims (None: the real one), so a
    test can make it lie either way; ``width``/``height`` go in as given (images), and
    so do ``duration_secs`` and ``waveform`` (a voice message's recording).
    """

    filename: str
    data: bytes = field(repr=False)
    content_type: str = "application/octet-stream"
    declared_size: int | None = None
    width: int | None = None
    height: int | None = None
    duration_secs: float | None = None
    waveform: str | None = None

    @property
    def size(self) -> int:
        """The ``size`` of its attachment object."""
        return len(self.data) if self.declared_size is None else self.declared_size


@dataclass(frozen=True)
class Download:
    """A GET of an attachment URL, recorded on arrival (``t``: ``time.monotonic()``):
    the ids and file name of its path, and whether the fake served it (else 404)."""

    channel_id: int
    attachment_id: int
    filename: str
    found: bool
    t: float


@dataclass(frozen=True)
class InteractionReply:
    """An answer to an interaction: ``data`` is the request body as sent.

    ``response_type`` is the callback type (4 message, 5 deferred, ...), None otherwise.
    """

    kind: ReplyKind
    token: str
    data: JSON
    content: str | None
    response_type: int | None = None
    files: tuple[Upload, ...] = ()
