"""structlog setup: JSON lines in production, a readable console in a terminal.

Every line carries `event`, `level` and an ISO-8601 UTC `timestamp`. Values of
keys that look like secrets are replaced by `[redacted]`, and so is any known
secret value (the configured tokens and keys) found inside any other string,
exception text included, in every form it may take there: as registered or
without the whitespace around it, and URL-encoded (either case of hex digits);
so is the password of any URL in a string (`without_password`: a store URL's).
The standard library's logging (discord.py, python-telegram-bot, httpx) and
Python warnings go through the same renderer, so stderr holds nothing but log
lines. discord.py's warnings that voice is not supported (no PyNaCl, no davey)
are dropped: soulbot has no voice.

Where the terminal chat runs on the stream (`configure_logging(..., chat=True)`),
the lines about a turn of that chat which its reply already tells the person
(TOLD_BY_THE_REPLY: the apology of a failed turn, an answer cut short, a refused
command) are dropped: in a chat a failure appears once, as the reply says it.
The same lines of another platform's chats stay, and so does every other line,
with an exception in one field (`error='CompileFailed: ...'`), not a traceback;
`soulbot chat 2>chat.log` (or `--log-format json`) keeps them all, whole.

While the terminal chat runs on a terminal the log lines would go to too,
they go to a file instead (`away_from_the_chat`: data_dir/logs/soulbot.log,
JSON lines at the configured level, none dropped), and one line on the terminal
says where: a log line printed between the prompt and the replies is read as
part of the conversation, and one printed at the quit looks like a crash. A log
that goes elsewhere already (`2>chat.log`, a pipe, journald) stays there.

`observing(processor)` has a processor see every event while it is open (the
daemon's metrics, bot/app/metrics.py): at every level, before the level filter,
before the bound context is merged (`_observe`, at the head of the chain).

Event names are dotted and stable; the ones soulbot emits:

    soul.loaded  soul.load_failed  soul.reloaded  soul.removed  soul.warning
    config.default_used  daemon.started  daemon.stopping  daemon.stopped
    metrics.serving  metrics.error
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import string
import sys
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import Any, Literal, TextIO, cast

import structlog

from bot.config.validation import SECRET_KEY
from bot.storage.postgres import without_password

LogFormat = Literal["json", "console"]
_CHATTY = ("httpx", "httpx2", "httpcore", "apscheduler")
# discord.py says so once per process when a client is made without the voice
# libraries; soulbot never speaks in a voice channel.
_NO_VOICE = re.compile(r"^\w+ is not installed, voice will NOT be supported$")
REDACTED = "[redacted]"
# The events of a turn whose reply tells the person about them: an apology (a failed
# turn, a failure in the router), a line added to the answer (cut, empty), a refusal
# or a failure of a command.
TOLD_BY_THE_REPLY = frozenset(
    {"turn.failed", "turn.cut", "turn.empty", "router.failed", "command.refused", "command.failed"}
)
# Characters a URL carries as they are (RFC 3986's unreserved set); any other may
# come percent-encoded.
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")


def _secret_pattern(secret: str) -> str:
    """A regex matching `secret` as written or with any of its characters
    URL-encoded (`%3A` or `%3a`; a space also as `+`)."""
    parts = []
    for char in secret:
        if char in _UNRESERVED:
            parts.append(re.escape(char))
            continue
        encoded = "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        forms = [re.escape(char), f"(?i:{encoded})"] + (["\\+"] if char == " " else [])
        parts.append(f"(?:{'|'.join(forms)})")
    return "".join(parts)


class SecretRedactor:
    """A structlog processor that hides secret keys and known secret values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Without the whitespace around it, a secret is found with it too (the
        # whitespace stays, the secret goes). Short values would redact ordinary
        # words; real tokens are long.
        stripped = sorted({s.strip() for s in secrets if len(s.strip()) >= 8}, key=len)
        patterns = [_secret_pattern(s) for s in reversed(stripped)]  # the longest first
        self._secrets = re.compile("|".join(patterns)) if patterns else None

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            value = without_password(value)
            return self._secrets.sub(REDACTED, value) if self._secrets else value
        if isinstance(value, dict):
            return {k: self._field(str(k), v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._scrub(v) for v in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        # Anything else is rendered with repr(): scrub that text (an exception
        # passed as a field may quote a URL with a token in it).
        text = repr(value)
        scrubbed = self._scrub(text)
        return value if scrubbed == text else scrubbed

    def _field(self, key: str, value: Any) -> Any:
        if SECRET_KEY.search(key) and value not in (None, ""):
            return REDACTED
        return self._scrub(value)

    def __call__(
        self, logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key in list(event):
            event[key] = self._field(key, event[key])
        return event


def _tidy_event(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Foreign lines (a warning's text, say) may end with a newline: drop it."""
    if isinstance(event.get("event"), str):
        event["event"] = event["event"].rstrip()
    return event


Processor = Callable[[Any, str, MutableMapping[str, Any]], MutableMapping[str, Any]]
_observers: list[Processor] = []


def _observe(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The processors of `observing`, in the order they came; nothing when none is."""
    for observer in tuple(_observers):
        event = observer(logger, method, event)
    return event


def _not_voice(record: logging.LogRecord) -> bool:
    """False for discord.py's line that voice is not supported (a missing library)."""
    msg = record.msg
    return not (record.name.startswith("discord") and isinstance(msg, str) and _NO_VOICE.match(msg))


def _untold(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Drop a line of TOLD_BY_THE_REPLY about the terminal chat's own conversation
    (its `platform` or `session` is the console's)."""
    console = event.get("platform") == "console" or str(event.get("session", "")).startswith(
        "console:"
    )
    if console and event.get("event") in TOLD_BY_THE_REPLY:
        raise structlog.DropEvent
    return event


def _one_line_exception(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """An exception (`exc_info`) as the line's `error` field, `Type: message`, when
    it has none (one that has says it already)."""
    exc_info = event.pop("exc_info", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    error = exc_info[1] if isinstance(exc_info, tuple) else exc_info
    if isinstance(error, BaseException):
        event.setdefault("error", f"{type(error).__name__}: {error}")
    return event


def default_format(stream: TextIO) -> LogFormat:
    """JSON unless the stream is a terminal."""
    return "console" if stream.isatty() else "json"


def configure_logging(
    fmt: LogFormat,
    level: str = "info",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
    *,
    chat: bool = False,
) -> None:
    """Route structlog, stdlib logging and warnings to `stream` (stderr by default).
    With `chat` (the terminal chat shows on the stream), the lines the chat's replies
    already tell are dropped (see the module docstring).

    Safe to call again (after the config is read, to add its secrets and level).
    """
    redactor = SecretRedactor(secrets)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # Tracebacks become text before the redactor, in both formats.
            structlog.processors.format_exc_info,
            _tidy_event,
            redactor,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(_not_voice)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Libraries that log every request or job at info: their warnings still show.
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    logging.captureWarnings(True)
    structlog.configure(
        processors=[
            _observe,  # the metrics count lines of every level
            structlog.stdlib.filter_by_level,  # a dropped line costs no more work
            *shared,
            *([_untold, _one_line_exception] if chat else []),  # after the context is merged
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


LOG_FILE_NOTE = "The log goes to {path} while the chat runs (tail -f it to follow)."


def _terminal_stream() -> TextIO | None:
    """The terminal the root logger's lines go to, if any."""
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        with contextlib.suppress(OSError, ValueError):  # a closed stream
            if stream is not None and stream.isatty():
                return cast(TextIO, stream)
    return None


def _open_log(path: Path) -> TextIO:
    """`path` opened to append, line by line: a new file is 0600 in a 0700
    folder (log lines name people and chats). Raises OSError."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8", buffering=1)


@contextlib.contextmanager
def away_from_the_chat(path: Path, level: str, secrets: Iterable[str]) -> Iterator[Path | None]:
    """While the context is open (the terminal chat runs), log lines that go to a
    terminal go to `path` instead: appended JSON lines at `level`, every line kept
    (a failed turn's too), secrets redacted as everywhere; one line on the
    terminal says where (LOG_FILE_NOTE). Yields the file's absolute path, or None
    when the lines go to no terminal (they are left where they go) or the file
    cannot be opened (one warning says why; they stay on the terminal). The
    set-up before is put back at exit. Does not touch the chat's own output."""
    root = logging.getLogger()
    terminal = _terminal_stream()
    if terminal is None:
        yield None
        return
    try:
        stream = _open_log(path)
    except OSError as exc:
        log = structlog.get_logger(__name__)
        log.warning("logs.file_failed", path=str(path), error=str(exc))
        yield None
        return
    handlers, root_level, saved = list(root.handlers), root.level, structlog.get_config()
    chatty = {name: logging.getLogger(name).level for name in _CHATTY}
    where = path.absolute()
    try:
        with contextlib.suppress(OSError, ValueError):  # the terminal went away
            terminal.write(LOG_FILE_NOTE.format(path=where) + "\n")
            terminal.flush()
        configure_logging("json", level, secrets, stream)
        yield where
    finally:
        root.handlers[:] = handlers
        root.setLevel(root_level)
        for name, old in chatty.items():
            logging.getLogger(name).setLevel(old)
        structlog.configure(**saved)
        stream.close()


@contextlib.contextmanager
def observing(processor: Processor) -> Iterator[None]:
    """Run `processor` on every structlog event while the context is open, first
    (whatever chain is configured: `configure_logging`'s, or a test's, which gains
    `_observe` at its head); it must return the event it was given and never raise."""
    chain = structlog.get_config()["processors"]
    if _observe not in chain:
        structlog.configure(processors=[_observe, *chain])
    _observers.append(processor)
    try:
        yield
    finally:
        _observers.remove(processor)
