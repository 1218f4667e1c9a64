"""What the Bot API fake (tests/fakes/telegram_fake.py) records and keeps, as
frozen dataclasses a test reads: each answered request (`Call`, with its status:
``CLIENT_CLOSED``, ``DROPPED``), the files in requests (`Upload`) and those users
sent (`UserFile`), downloads, drafts, edits, deletions, documents, the webhook
and each post to it (`Push`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

CLIENT_CLOSED = 499  # recorded status of a request whose client went away
DROPPED = 444  # recorded status of a request the fake hung up on (nginx's "no response")


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
class UserFile:
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


@dataclass(frozen=True)
class Call:
    """One answered request: method as sent, parsed params, monotonic arrival time,
    HTTP status (200, an error status, or 499 if the client went away) and result."""

    method: str
    params: JSON
    t: float
    status: int = 200
    result: Any = None
