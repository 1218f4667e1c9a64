"""The terminal: lines typed on stdin are messages, replies are printed.

A daemon thread reads stdin (with line editing when it is a terminal) and hands
each line to the event loop, so a blocked read never holds up shutdown. At the
end of input the adapter calls `on_eof` (the `chat` command quits then).

Line editing (readline) puts the terminal in a mode of its own (no echo, no
line buffering) while it waits for a line, and the process may end in that wait
(Ctrl-C): the terminal's settings are saved at start and put back at stop and
close, and at exit if neither ran, so the shell is given back as it was.

A reply's attachment (`/memory export`) is written to a new file in
`files_dir` (data_dir/exports under `soulbot chat`: folder 0700, file 0600, a
name never reused) and its path printed: a terminal cannot take a file, and
data_dir is where soulbot keeps what is private.

While a reply is pending, a terminal shows "Wren is thinking…" (the soul's
name) on the prompt's line (`typing`): written whole, cut to the terminal's
width so it never wraps, and erased when the reply or the failure comes, when
the turn is cancelled (Ctrl-C, the end of input) and at close, so the terminal
is left as it was found. Output that is no terminal (a pipe, a file) gets no
indicator: what reads it wants the replies, and a line drawn and erased there
would be noise left in the file.

A reply that says a turn failed carries why (`Outbound.cause`): the terminal's
user is the operator (an admin), so on a terminal the cause follows the reply in
one line (`why: model unreachable: connection refused at http://...`), where a
platform's chat shows the apology alone. Output that is no terminal gets the
reply alone too (a program reads it; the log says why, `turn.failed`).

While the daemon stops, a terminal shows one short line per step (it is a
`ShutdownWatcher`): a stop that saves memory takes a while, and a silent one
looks hung. Output that is no terminal (a pipe) gets replies only.

Replies are Markdown, written for Discord and Telegram, which render it; the
terminal renders the same forms (`render`), so a reply reads the same in all
three and no markup is left to read: a fenced block's lines are printed without
the fence lines, indented by two spaces (a `/soul usage` table stays a table,
code stays as written inside it); `**bold**` is bold; `` `code` `` loses its
backticks; a backslash escape (a backslash before a punctuation character, which
command replies put before the Markdown characters of the names they show) is
the character alone. This holds for
the model's replies as much as for command answers: a terminal user expects the
words the soul wrote, not its markup. Bold is ANSI bold only on a terminal
without `NO_COLOR` (nor `TERM=dumb`); elsewhere it is the words alone. Other
Markdown (italics, links, headings) is left as written.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import getpass
import itertools
import os
import re
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TextIO

from adapters.base import Deliver
from bot.types import Attachment, Inbound, Outbound, ShutdownStep


class _Terminal:
    """The settings of the terminal `stream` is on, saved to be put back; does
    nothing where there is no terminal (or no termios)."""

    def __init__(self, stream: TextIO) -> None:
        self._fd = -1
        self._saved: list[Any] | None = None
        try:
            import termios
        except ImportError:
            return
        try:
            self._fd = stream.fileno()
            self._saved = termios.tcgetattr(self._fd)
        except (termios.error, OSError, ValueError):  # not a terminal after all
            return
        atexit.register(self.restore)

    def restore(self) -> None:
        """Put the saved settings back (after any output still queued). Idempotent."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        atexit.unregister(self.restore)
        import termios

        with contextlib.suppress(termios.error, OSError):  # the terminal went away
            termios.tcsetattr(self._fd, termios.TCSADRAIN, saved)


def _local_user() -> str:
    """The login name, or "local" where there is none (a container user)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local"


_QUIT = ("/quit", "/exit")

_FENCE = re.compile(r"^\s*(```|~~~)\s*[\w+#.-]*\s*$")  # as adapters/telegram_format.py
# A backslash escape (of ASCII punctuation) or a code span (between runs of as many
# backticks), whichever starts first: an escaped backtick opens no span, and a
# backslash inside a span is literal.
_ESCAPE_OR_CODE = re.compile(r"\\([!-/:-@\[-`{-~])|(?<!`)(`+)(?!`)(.+?)(?<!`)\2(?!`)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_KEPT = re.compile("\x00(\\d+)\x00")
BOLD, NORMAL = "\x1b[1m", "\x1b[22m"
CODE_INDENT = "  "


def render(markdown: str, ansi: bool) -> str:
    """`markdown` as a terminal shows it (see the module docstring); `ansi`: bold
    as the terminal's bold, else as the words alone."""
    out: list[str] = []
    fence: str | None = None  # the fence a code block opened with, while in one
    for line in markdown.split("\n"):
        found = _FENCE.match(line)
        if fence is None and found:
            fence = found[1]
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is not None:
            out.append(CODE_INDENT + line if line else line)
        else:
            out.append(_inline(line, ansi))
    return "\n".join(out)


def _inline(line: str, ansi: bool) -> str:
    """One line of prose: code spans and escapes as their text, bold as bold."""
    kept: list[str] = []

    def keep(m: re.Match[str]) -> str:
        code = m[3]
        if code is not None and code.startswith(" ") and code.endswith(" ") and code.strip():
            code = code[1:-1]  # `` `x` `` is `x`, as CommonMark has it
        kept.append(m[1] if m[1] is not None else code)
        return f"\x00{len(kept) - 1}\x00"

    line = _ESCAPE_OR_CODE.sub(keep, line.replace("\x00", ""))
    line = _BOLD.sub(lambda m: f"{BOLD}{m[1]}{NORMAL}" if ansi else m[1], line)
    return _KEPT.sub(lambda m: kept[int(m[1])], line)


def _ansi(stream: TextIO) -> bool:
    """Whether `stream` takes ANSI styles: a terminal, no `NO_COLOR`, not `TERM=dumb`."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


THINKING = "{name} is thinking{dots}"
ERASE_LINE = "\x1b[2K\r"  # erase the whole line, then to its start


def _dots(stream: TextIO) -> str:
    """An ellipsis, or three dots where the stream's encoding has none."""
    try:
        "…".encode(getattr(stream, "encoding", None) or "utf-8")
    except (LookupError, UnicodeEncodeError):
        return "..."
    return "…"


def _width(stream: TextIO) -> int:
    """The terminal's width in columns (80 when it cannot say)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


# What the terminal shows of the daemon's stop, by step (bot.types.ShutdownStep).
STOPPING = "Stopping. Ctrl-C {keys} quits at once (your messages are kept)."
FORCED = "Quitting now: your messages are kept, the rest waits for the next start."
STOPPED = "Stopped."
_TASKS = {"heartbeat": "saving reflections", "compile": "saving memory"}


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def shutdown_line(step: ShutdownStep) -> str:
    """The line a terminal shows for `step`."""
    count = step.count or 0
    if step.failed:
        return f"{_TASKS.get(step.name, step.name)}: not finished (the log says why)"
    if step.name == "stopping":
        return STOPPING.format(keys="again" if count <= 1 else "twice")
    if step.name == "forced":
        return FORCED
    if step.name == "done":
        return STOPPED
    if step.name == "replies":
        return f"waiting for {_plural(count, 'reply', 'replies')} in flight..."
    if step.name == "writes":
        return f"storing {_plural(count, 'memory write', 'memory writes')}..."
    if step.name == "compile":
        return "saving memory... " + (_plural(count, "wiki", "wikis") if count else "nothing new")
    return f"{_TASKS.get(step.name, step.name)}..."


class ConsoleAdapter:
    """Chat in the terminal as the local user."""

    name = "console"

    def __init__(
        self,
        soul_name: str,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        on_eof: Callable[[], None] | None = None,
        files_dir: Path | None = None,
    ) -> None:
        self._soul_name = soul_name
        self._files_dir = files_dir
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._on_eof = on_eof
        self._user = _local_user()
        self._deliver: Deliver | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = threading.Event()
        self._count = 0
        self._run_id = uuid.uuid4().hex[:12]  # message ids unique across restarts
        self._queue: asyncio.Queue[Inbound | None] = asyncio.Queue()
        self._pump_task: asyncio.Task[None] | None = None
        self._interactive = self._stdin.isatty() and self._stdout.isatty()
        self._tty = self._stdout.isatty()
        self._ansi = _ansi(self._stdout)
        self._terminal: _Terminal | None = None
        self._pending = 0  # turns whose reply is pending (`typing`)
        self._drawn = ""  # the line drawn last without its newline (prompt, indicator)
        self._closed = False

    def _prompt(self) -> str:
        return "you> " if self._interactive else ""

    async def start(self, deliver: Deliver) -> None:
        if self._deliver is not None:
            raise RuntimeError("ConsoleAdapter.start() was already called")
        self._deliver = deliver
        self._loop = asyncio.get_running_loop()
        self._pump_task = self._loop.create_task(self._pump(), name="console-pump")
        if self._interactive:
            self._terminal = _Terminal(self._stdin)
            with contextlib.suppress(ImportError):
                import readline  # noqa: F401  (line editing for input())
            self._stdout.write(
                f"Chatting with {self._soul_name}. /reset starts over, /quit ends.\n"
            )
            self._stdout.flush()
        threading.Thread(target=self._read, name="console-stdin", daemon=True).start()

    def _read(self) -> None:
        while not self._stopped.is_set():
            line: str | None
            if self._interactive:
                try:
                    line = input(self._prompt())
                except (EOFError, KeyboardInterrupt):
                    line = None
            else:
                raw = self._stdin.readline()
                line = raw.rstrip("\n") if raw else None
            self._from_thread(line)
            if line is None or line.strip() in _QUIT:
                return  # no new prompt (readline would take the terminal again)

    def _from_thread(self, line: str | None) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._accept, line)

    def _accept(self, line: str | None) -> None:
        if self._stopped.is_set() or self._deliver is None:
            return
        if line is not None and not line.strip():
            return
        if line is None or line.strip() in _QUIT:
            self._stopped.set()
            if self._on_eof is not None:
                self._on_eof()
            return
        self._count += 1
        inbound = Inbound(
            platform="console",
            chat_id=self._user,
            user_id=self._user,
            user_name=self._user,
            text=line,
            is_dm=True,
            message_id=f"{self._run_id}:{self._count}",
        )
        self._queue.put_nowait(inbound)

    async def _pump(self) -> None:
        """Deliver lines one at a time, in the order they were typed."""
        while True:
            inbound = await self._queue.get()
            if inbound is None or self._deliver is None:
                return
            await self._deliver(inbound)

    async def stop(self) -> None:
        """Stop reading; lines already read are still delivered. The terminal is
        given back as it was (replies are still printed)."""
        self._stopped.set()
        if self._terminal is not None:
            self._terminal.restore()
        if self._pump_task is not None:
            self._queue.put_nowait(None)
            await self._pump_task

    def connected(self) -> bool:
        """Started and still reading the terminal."""
        return self._deliver is not None and not self._stopped.is_set()

    def last_seen(self) -> None:
        """None: a quiet terminal is a person not typing, never a deaf connection."""
        return None

    def typing(self, chat: Inbound) -> AbstractAsyncContextManager[None]:
        """Show `THINKING` on a terminal while the context is open (see the
        module docstring); nothing elsewhere. Never raises."""
        return self._thinking()

    @contextlib.asynccontextmanager
    async def _thinking(self) -> AsyncIterator[None]:
        self._pending += 1
        with contextlib.suppress(OSError, ValueError):  # the terminal went away
            self._write("")
        try:
            yield
        finally:
            self._pending -= 1
            with contextlib.suppress(OSError, ValueError):
                self._write("")

    def _bottom(self) -> str:
        """The last line, with no newline: the indicator while a reply is pending
        (on a terminal), else the prompt while the reader waits for a line."""
        if self._closed:
            return ""
        if self._tty and self._pending:
            dots = _dots(self._stdout)
            line = THINKING.format(name=self._soul_name, dots=dots)
            width = _width(self._stdout) - 1  # the cursor stays on the line: no wrap
            return line if len(line) <= width else line[: max(0, width - len(dots))] + dots
        return self._prompt() if not self._stopped.is_set() else ""

    def _erase(self) -> str:
        """What takes the last drawn line off the screen (spaces over it where
        the terminal takes no ANSI, `TERM=dumb`)."""
        if not (self._drawn or self._interactive):  # the reader's prompt may be there
            return ""
        if os.environ.get("TERM") == "dumb":
            return "\r" + " " * len(self._drawn) + "\r"
        return ERASE_LINE

    def _write(self, text: str) -> None:
        """Write `text` (whole lines) above the last line, which is drawn again
        (`_bottom`); on a terminal only, with no text, the last line alone.
        Raises OSError when the terminal is gone."""
        bottom = self._bottom() if self._tty else ""
        if not text and bottom == self._drawn:
            return
        self._stdout.write(self._erase() + text + bottom)
        self._stdout.flush()
        self._drawn = bottom

    def notes(self) -> list[str]:
        return []

    def stream(self, message: Outbound) -> None:
        """None: a terminal prints the reply whole (a line being rewritten would
        fight the prompt line under it)."""
        return None

    async def send(self, message: Outbound) -> list[str]:
        """Print the reply, its Markdown rendered (`render`); an attachment is
        saved first (see the module's docstring) and a line with its path
        follows the text; an image is not shown (a terminal shows no picture:
        `soulbot usage` has the figures of `/soul usage`'s chart). Raises
        OSError when it cannot be saved, RuntimeError when there is no
        `files_dir`."""
        prefix = f"{self._soul_name}> "
        body = render(message.text, self._ansi)
        if message.attachment is not None:
            saved = await asyncio.to_thread(self._save, message.attachment)
            body = "\n".join([*([body] if body else []), f"(file saved: {saved})"])
        if message.cause and self._tty:
            body = "\n".join([*([body] if body else []), "why: " + " ".join(message.cause.split())])
        # The prompt (or the indicator) is on screen: write over it, then again.
        self._write(prefix + body.replace("\n", "\n" + " " * len(prefix)) + "\n")
        return []

    def _save(self, file: Attachment) -> Path:
        """Write `file` to a new file in `files_dir`; returns its path."""
        if self._files_dir is None:
            raise RuntimeError("the terminal chat has no folder for files (files_dir)")
        self._files_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = Path(Path(file.filename).name if file.filename not in ("", ".", "..") else "file")
        stem, suffix = name.stem, name.suffix
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for n in itertools.count():
            path = self._files_dir / (f"{stem}{suffix}" if n == 0 else f"{stem}-{n}{suffix}")
            try:
                fd = os.open(path, flags, 0o600)
            except FileExistsError:
                continue
            break
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(file.data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return path

    def shutdown_step(self, step: ShutdownStep) -> None:
        """One line on a terminal for each step of the daemon's stop."""
        if not self._interactive:
            return
        with contextlib.suppress(OSError, ValueError):  # the terminal went away
            self._write(shutdown_line(step) + "\n")

    async def close(self) -> None:
        """Stop reading; the indicator, when drawn, is erased; the terminal is
        given back as it was. Idempotent."""
        self._stopped.set()
        self._closed = True
        with contextlib.suppress(OSError, ValueError):  # the terminal went away
            self._write("")
        if self._terminal is not None:
            self._terminal.restore()
