"""The shared vocabulary: what crosses the seams between adapters, chat, the
model and memory. Frozen dataclasses, no I/O.

`Inbound` / `Outbound` are the adapter seam's messages (a `Quote` is the
message an inbound one replies to, a `Media` an image it carries and an
`Audio` a voice note or audio file it carries, neither downloaded yet; an
`Attachment` is a file a reply carries, a `ReplyStream` a reply shown while
the model writes it, and a `VoiceNote` a reply spoken, in OGG/Opus); `Route`
says where a conversation lives; `Scope` and
`SessionKey` are the keys it is made of, and validate their parts, so a
scope's folder is built only from checked parts;
`Tool` is a tool the model may call; `ShutdownStep` is one step of the
daemon's graceful stop, shown by an adapter that is a `ShutdownWatcher` (the
terminal chat). `AdapterStartError` (bot/errors.py) is
named here too: it is the one error an adapter raises at the seam, and
adapters import nothing of `bot` but this module.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from bot.errors import AdapterStartError, InvalidKeyError

__all__ = [
    "IMAGE_BYTES",
    "IMAGE_TYPES",
    "SHARED",
    "AdapterStartError",
    "Attachment",
    "Audio",
    "Inbound",
    "Media",
    "Outbound",
    "Quote",
    "ReplyStream",
    "Route",
    "Scope",
    "SessionKey",
    "ShutdownStep",
    "ShutdownWatcher",
    "Tool",
    "ToolHandler",
    "VoiceNote",
]

SHARED = "shared"
# The images the model reads: their media types, and the largest (the Messages API
# takes 5 MB of base64 data an image, which is 3/4 of that in bytes). The core
# refuses what is larger, by the size a platform announces or the one it gets.
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
IMAGE_BYTES = 5 * 1024 * 1024 * 3 // 4

# A platform name, and an id from a platform (a user, a chat, a channel, a topic,
# a login name): no ":" (the keys' separator), no "/" (folders), no "." alone.
_PLATFORM = re.compile(r"[a-z][a-z0-9_]{0,31}")
_ID = re.compile(r"[A-Za-z0-9_@+\-][A-Za-z0-9_.@+\-]{0,127}")


def _check(what: str, value: str, pattern: re.Pattern[str]) -> None:
    if not pattern.fullmatch(value):
        raise InvalidKeyError(what, value)


@dataclass(frozen=True)
class Quote:
    """The message an inbound one replies to: its sender's display name, its
    text (Telegram's partial quote when the person picked one; the core cuts
    it to 500 characters) and whether it is the bot's own."""

    user_name: str
    text: str
    from_bot: bool = False


@dataclass(frozen=True)
class Media:
    """An image a message carries, not downloaded yet (the core downloads it
    only for a message it answers): its kind as the person sees it (`photo`,
    `image`), its media type (`image/png`), its size in bytes as the platform
    announces it (None when it does not), the coroutine that downloads it
    (raises on any failure; the core bounds it with a timeout and checks the
    size and the type it gets) and its file name as the person sent it ("" for
    a photo, which has none)."""

    kind: str
    mime: str
    size: int | None
    fetch: Callable[[], Awaitable[bytes]] = field(repr=False, compare=False)
    name: str = ""


@dataclass(frozen=True)
class Audio:
    """A voice note (`voice`: Telegram's voice note, Discord's voice message)
    or an audio file (`audio`) a message carries, not downloaded yet (the core
    downloads it only for a message it hears): its media type as announced, its
    length in seconds and its size in bytes as the platform announces them
    (None when it does not), `fetch(limit)`, which downloads at most `limit` + 1
    bytes (more than `limit` means the file is larger: the download stops
    there; raises on any failure), and its file name as the person sent it
    ("" for a voice note)."""

    kind: Literal["voice", "audio"]
    mime: str
    seconds: float | None
    size: int | None
    fetch: Callable[[int], Awaitable[bytes]] = field(repr=False, compare=False)
    name: str = ""


@dataclass(frozen=True)
class Inbound:
    """One message from a platform, in our own terms."""

    platform: str
    chat_id: str
    user_id: str
    user_name: str
    text: str
    is_dm: bool
    mentions_bot: bool = False
    reply_to_bot: bool = False
    message_id: str = ""
    thread_id: str | None = None
    guild_id: str | None = None
    ts: float = field(default_factory=time.time)
    private_thread: bool = False
    """A thread only its members can read (a Discord private thread)."""
    media: bool = False
    """A video or file came that is not read (no text, no image, no audio)."""
    quote: Quote | None = None
    """The message this one replies to, when the platform gives it."""
    reply_to_id: str | None = None
    """The platform id of the message this one replies to."""
    images: tuple[Media, ...] = ()
    """The images it carries (a photo, image attachments), to download."""
    audio: tuple[Audio, ...] = ()
    """The voice notes and audio files it carries, to download and transcribe."""
    spoken: bool = False
    """The person spoke it: `text` is the transcript of a voice note."""
    from_bot: bool = False
    """Another bot wrote it (Discord's `author.bot`, Telegram's `from.is_bot`); the bot's own
    messages never become an Inbound."""

    def address(self) -> str:
        """The message as JSON, without its text, its quote and its media: the
        reply address a session keeps (`from_address` reads it back)."""
        skip = {"text", "quote", "images", "audio"}
        plain = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        return json.dumps({**plain, "text": ""})

    @classmethod
    def from_address(cls, address: str) -> Inbound:
        """The message `address` stored. Raises ValueError or TypeError for a
        broken one."""
        return cls(**json.loads(address))


@dataclass(frozen=True)
class Attachment:
    """A file sent with a reply: its name as the person sees it, its bytes and
    its media type (`text/markdown`)."""

    filename: str
    data: bytes = field(repr=False)
    mime: str = "application/octet-stream"


@dataclass(frozen=True)
class VoiceNote:
    """A reply spoken: OGG/Opus bytes (48 kHz, mono), how long it plays, and
    its waveform (up to 256 amplitudes, 0-255, one a tenth of a second at most:
    what Discord draws under a voice message)."""

    data: bytes = field(repr=False)
    duration_s: float
    waveform: bytes = field(repr=False, default=b"")


@dataclass(frozen=True)
class Outbound:
    """One reply for a chat; `reply_to` is the platform message id it answers.
    With an `attachment` the text may be empty: the file goes after the text
    (Telegram: a document; Discord: on the last chunk; the terminal: a file
    saved under data_dir, its path printed). When the text says a turn failed
    (an apology), `cause` says why in one line for an operator, never a secret
    (`model unreachable: connection refused at http://...`): only an adapter
    whose reader is the operator shows it (the terminal chat); the platforms'
    chats show the text alone. A `voice` note goes after the text, as a
    voice message (Telegram `sendVoice`; Discord a voice message, or an audio
    file where it may not send one); with it the text is often empty."""

    platform: str
    chat_id: str
    text: str
    thread_id: str | None = None
    reply_to: str | None = None
    attachment: Attachment | None = None
    cause: str | None = None
    voice: VoiceNote | None = None


@dataclass(frozen=True)
class Scope:
    """A memory scope: `shared` (the soul's own wiki), one person's
    (`user:<platform>:<id>`), one chat's (`chat:<platform>:<id>`) or one
    member's of one server or group (`member:<platform>:<server>:<id>`)
    private memory; or `members:<platform>:<server>`, a place bound to
    `memory: per-member`, which has no wiki of its own: each speaker's words
    go to their `member` scope there (`member`). Raises InvalidKeyError for a
    part that breaks the rule."""

    kind: Literal["shared", "user", "chat", "member", "members"]
    platform: str = ""
    id: str = ""
    server: str = ""
    """The server (a Discord guild) or group (a Telegram chat) of a `member` scope."""

    def __post_init__(self) -> None:
        if self.kind == SHARED:
            if self.platform or self.id or self.server:
                raise InvalidKeyError("shared scope", f"{self.platform}:{self.id}")
            return
        if self.kind not in ("user", "chat", "member", "members"):
            raise InvalidKeyError("scope kind", self.kind)
        _check("platform", self.platform, _PLATFORM)
        _check("id", self.id, _ID)
        if self.kind == "member":
            _check("server id", self.server, _ID)
        elif self.server:
            raise InvalidKeyError(f"{self.kind} scope", f"{self.server}:{self.id}")

    @classmethod
    def parse(cls, text: str) -> Scope:
        """`shared`, `user:<platform>:<id>`, `chat:<platform>:<id>`,
        `member:<platform>:<server>:<id>` or `members:<platform>:<server>`.
        Raises InvalidKeyError."""
        if text == SHARED:
            return cls("shared")
        parts = text.split(":")
        if len(parts) == 4 and parts[0] == "member":
            return cls("member", parts[1], parts[3], server=parts[2])
        if len(parts) != 3 or parts[0] not in ("user", "chat", "members"):
            raise InvalidKeyError("scope", text)
        kind: Literal["user", "chat", "members"] = (
            "user" if parts[0] == "user" else "chat" if parts[0] == "chat" else "members"
        )
        return cls(kind, parts[1], parts[2])

    @property
    def is_shared(self) -> bool:
        return self.kind == SHARED

    @property
    def per_member(self) -> bool:
        """Whether this is a per-member place (`members:`), with no wiki of its own."""
        return self.kind == "members"

    def member(self, user_id: str) -> Scope:
        """The `member` scope of `user_id` in this per-member place. Raises
        InvalidKeyError for another kind of scope, or an id that breaks the rule."""
        if not self.per_member:
            raise InvalidKeyError("per-member place", str(self))
        return Scope("member", self.platform, user_id, server=self.id)

    def folder(self, base: Path) -> Path:
        """The folder of a private scope's wiki under `base` (the soul's folder
        in `data_dir/memory`). Raises InvalidKeyError for the shared scope,
        whose wiki is the soul's own `memory/`, and for a per-member place,
        which has none."""
        if self.is_shared or self.per_member:
            raise InvalidKeyError("private scope", str(self))
        if self.kind == "member":
            return base / self.kind / self.platform / self.server / self.id
        return base / self.kind / self.platform / self.id

    def __str__(self) -> str:
        if self.is_shared:
            return SHARED
        if self.kind == "member":
            return f"member:{self.platform}:{self.server}:{self.id}"
        return f"{self.kind}:{self.platform}:{self.id}"


@dataclass(frozen=True)
class SessionKey:
    """Which conversation a message belongs to: `<platform>:<chat>`, with
    `:<topic>` for a forum topic, or `<platform>:dm:<user>` where a platform's
    DMs are keyed by the person (Discord). Raises InvalidKeyError."""

    platform: str
    chat: str
    topic: str | None = None
    dm: bool = False

    def __post_init__(self) -> None:
        _check("platform", self.platform, _PLATFORM)
        _check("chat id", self.chat, _ID)
        if self.topic is not None:
            _check("topic id", self.topic, _ID)
        if self.dm and self.topic is not None:
            raise InvalidKeyError("session key", f"{self.platform}:dm:{self.chat}:{self.topic}")

    def __str__(self) -> str:
        middle = ["dm", self.chat] if self.dm else [self.chat]
        tail = [self.topic] if self.topic is not None else []
        return ":".join([self.platform, *middle, *tail])


class ReplyStream(Protocol):
    """A reply shown while the model writes it (an adapter's `stream`): a
    Telegram draft, or a message sent early and edited, at most once a second."""

    async def update(self, text: str) -> None:
        """The answer so far, all of it; shown at the platform's pace, the
        latest text winning. Quick, and never raises (a failed preview is
        logged; the final reply still comes)."""

    async def finish(self, message: Outbound) -> list[str]:
        """Make `message` the reply: what was shown becomes it (its last edit,
        or the message that ends a draft), split at the platform's limit, so
        the chat ends with exactly what `send` would have left. Returns the
        platform ids of the reply's messages. Raises like `send`."""

    async def abort(self) -> None:
        """End the reply unfinished (its turn was cancelled): nothing is shown
        after this returns, and what was shown is taken away where the platform
        allows it. Never raises."""


@dataclass(frozen=True)
class Route:
    """Where a conversation lives: which soul answers, in which memory scope,
    for which session key and user (`platform:id`)."""

    soul: str
    scope: str
    session: str
    user: str
    is_dm: bool


ToolHandler = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its schema and the coroutine that answers it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: ToolHandler

    def spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


@dataclass(frozen=True)
class ShutdownStep:
    """One step of the daemon's graceful stop, as it starts: `stopping` (the
    first; `count`: the signals that would force the stop), `replies` (`count`
    turns in flight), `writes` (`count` memory writes), then each shutdown
    task by its name (`heartbeat`; `compile`, with `count` wikis to compile),
    and `done`; `forced` when a second signal cuts it short. A task that fails
    or is cut short is reported again with `failed` set."""

    name: str
    count: int | None = None
    failed: bool = False


@runtime_checkable
class ShutdownWatcher(Protocol):
    """An adapter that shows the graceful stop as it goes (the terminal chat)."""

    def shutdown_step(self, step: ShutdownStep) -> None:
        """Show `step`; quick, and never raises."""
