"""The error tree of soulbot.

    SoulbotError
    ├── ConfigError          the config file: which file, which key path, what was expected
    ├── SoulLoadError        a soul workspace: which file, which field, what was expected
    ├── RegionError          a SOUL.md whose regions cannot be read (also a ValueError)
    ├── Rejected             a reflection or a SOUL.md write the heartbeat refuses (ValueError)
    ├── SoulWriteStopped     a SOUL.md write that did not happen: its lock across hosts not held
    ├── InvalidKeyError      a scope or session key part that breaks the key rule (ValueError)
    ├── InvalidWikiPageIdError  a memory wiki page id that breaks the id rule
    ├── PageFormatError      a wiki page whose front matter or encoding cannot be read (ValueError)
    ├── WikiPathRefused      the file system refuses a page's path (also an OSError)
    ├── CompileFailed        one or more wikis failed to compile; carries those that did
    ├── WikiError            a change to one wiki (soul, scope) that was stopped
    │   ├── WikiBusy           another process is compiling a wiki that must not change now
    │   ├── WikiLockLost       a wiki's lock went with a lost connection, and another process has it
    │   └── ScopeErased        a scope was erased while a compile of it ran (it starts over)
    ├── BudgetExceeded       a model call the daily token budget refuses (it is not made)
    ├── ModelError           a model call that failed, after the SDK's retries
    │   ├── ModelUnavailable   timeouts, connection errors, 5xx, 529, 429: worth another try
    │   └── ModelRejected      a 4xx our request caused: another try gets the same answer
    │       └── ToolsUnsupported  a call that needs a tool, to a server known to have none
    ├── TranscriptionFailed  a voice note the transcription service did not turn into text
    ├── SpeechError          a reply that could not be spoken (its text is sent all the same)
    ├── DataDirInUse         another daemon serves from the same data_dir
    ├── StorageError         data_dir or the database cannot be used: which path, why, what to do
    │   └── StoreUnavailable   a store call timed out or lost its server: worth another try
    └── AdapterStartError    an adapter could not connect (raised at the adapter seam)

Every message says what failed and where, and never carries a secret value.
Library errors are translated at the boundary (`raise Ours(...) from exc`).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any


class SoulbotError(Exception):
    """Root of every error soulbot raises on purpose."""


class ConfigError(SoulbotError):
    """The config file cannot be read or does not fit the schema."""


class SoulLoadError(SoulbotError):
    """A soul workspace cannot be loaded."""


class RegionError(SoulbotError, ValueError):
    """A SOUL.md whose regions cannot be read; the message says where."""


class Rejected(SoulbotError, ValueError):
    """A reflection (or a write) that must not reach SOUL.md; the message is the reason."""


class SoulWriteStopped(SoulbotError):
    """A write of `soul`'s SOUL.md that did not happen, nothing changed: on a
    shared store, another process held the soul's lock past the wait, or this
    process lost it with the store's connection before it wrote (bot/soul/soullock.py).
    The message says which."""

    def __init__(self, soul: str, reason: str) -> None:
        super().__init__(f"{soul}: SOUL.md was not written: {reason}")
        self.soul = soul


class InvalidKeyError(SoulbotError, ValueError):
    """A part of a memory scope or a session key that breaks the key rule (a
    platform name: lower-case letters, digits, `_`; an id: letters, digits and
    `_.@+-`, no `:` or `/`, not starting with `.`). `what` names the part."""

    def __init__(self, what: str, value: str) -> None:
        super().__init__(f"invalid {what} {value!r} in a memory scope or session key")
        self.what = what
        self.value = value


class BudgetExceeded(SoulbotError):
    """A daily token budget refuses a model call; the call is not made.

    `kind` is "soul", "user", "admin" or "background"; `limit` and `used` are today's tokens.
    """

    def __init__(self, kind: str, who: str, limit: int, used: int) -> None:
        super().__init__(f"daily {kind} token budget reached for {who}: {used} of {limit} used")
        self.kind = kind
        self.who = who
        self.limit = limit
        self.used = used


class ModelError(SoulbotError):
    """A model call failed after the SDK's own retries. `error_class` names
    the SDK error. Raised as one of its two subclasses, which say whether
    another try can help. `cause` is the failure in one line for an operator
    (`model unreachable: connection refused at http://...`), never a secret;
    by default the message."""

    def __init__(
        self, error_class: str, message: str, cause: str = "", status: int | None = None
    ) -> None:
        super().__init__(f"{error_class}: {message}")
        self.error_class = error_class
        self.reason = message
        self.status = status  # the HTTP status of the answer, when there was one
        self.cause = cause or f"model error: {error_class}: {message}"


class ModelUnavailable(ModelError):
    """The model could not answer now (a timeout, a lost connection, 5xx, 529
    overloaded, 429 rate limited): the same request may work in a moment."""


class ModelRejected(ModelError):
    """The API refused the request itself (a 4xx other than 429: a bad key, a
    request too large, an unknown model): the same request fails again."""


class ToolsUnsupported(ModelRejected):
    """A call that must use a tool (the compile's filing, the heartbeat) was
    refused (a 400) by a model server known not to do tool calling. The same
    request fails again; the work waits, its inputs kept, for a server with tool
    calling (docs/model-servers.md)."""


class TranscriptionFailed(SoulbotError):
    """The transcription service did not answer with a transcript (unreachable,
    a timeout, an error status, an answer that is no transcript). `reason`:
    the failure in a few words for the person (`the service answered 429`);
    the message adds the service's own words for the log, never a secret."""

    def __init__(self, reason: str, detail: str = "", status: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.status = status


class InvalidWikiPageIdError(SoulbotError):
    """A wiki page id that breaks the page-id rule or names a path outside
    `memory/`. `page_id` is the id as given."""

    def __init__(self, page_id: str, reason: str) -> None:
        super().__init__(f"invalid wiki page id {page_id!r}: {reason}")
        self.page_id = page_id
        self.reason = reason


class PageFormatError(SoulbotError, ValueError):
    """A page file whose front matter or encoding cannot be read."""

    def __init__(self, page_id: str, reason: str) -> None:
        super().__init__(f"wiki page {page_id!r}: {reason}")
        self.page_id = page_id
        self.reason = reason


# Errors that say the path itself is refused (write() and fsync() never give them).
_PATH_REFUSED = {
    errno.ENAMETOOLONG: "a name in it is too long",
    errno.ENOTDIR: "a file is where a folder must be",
    errno.EEXIST: "a file is where a folder must be",
    errno.EISDIR: "a folder is where the page file must be",
    errno.ELOOP: "it runs through too many links",
    errno.EILSEQ: "the file system cannot store a name in it",
}


class WikiPathRefused(SoulbotError, OSError):
    """The file system refuses the path of page `page_id`: a name too long, a
    file where a folder must be, a folder where the file must be. Any other
    failed write (a full disk) is a plain OSError."""

    @staticmethod
    def refuses(exc: OSError) -> bool:
        """Whether `exc` says the path itself is refused."""
        return exc.errno in _PATH_REFUSED

    def __init__(self, page_id: str, cause: OSError) -> None:
        why = _PATH_REFUSED.get(cause.errno or 0, cause.strerror)
        # EXDEV: soulbot's own refusal of a link that leads out (bot/memory/wiki.py).
        who = "soulbot" if cause.errno == errno.EXDEV else "the file system"
        OSError.__init__(self, cause.errno, f"{who} refuses page {page_id!r}: {why}")
        if cause.filename is not None:
            self.filename = cause.filename
        self.page_id = page_id


class CompileFailed(SoulbotError):
    """One or more wikis failed to compile; `results` are those that did
    (CompileResult of bot/memory/compile.py), `failures` one line each."""

    def __init__(self, results: list[Any], failures: list[str]) -> None:
        super().__init__(f"{len(failures)} wiki(s) failed to compile: " + "; ".join(failures))
        self.results = results
        self.failures = failures


class WikiError(SoulbotError):
    """What stopped a change to the wiki of `soul` and `scope`; `reason` ends
    the message, after the wiki's name."""

    reason = ""

    def __init__(self, soul: str, scope: str) -> None:
        super().__init__(f"the wiki of {soul} {scope} {self.reason}")
        self.soul = soul
        self.scope = scope


class WikiBusy(WikiError):
    """Another process holds the lock of the wiki (a `soulbot compile` run):
    a change to it waits for that to end; trying again in a minute is the fix."""

    reason = "is being compiled by another process: try again when it is done"


class WikiLockLost(WikiError):
    """The lock of the wiki went with the store's lost connection (a server
    restart, a network cut) and another process holds it now: the work under
    it stops before it writes; its next run does it."""

    reason = (
        "lost its lock with the store's connection, and another process holds it now: "
        "stopped before writing; the next run does it"
    )


class ScopeErased(WikiError):
    """The wiki's scope was erased (`/forget`, `/memory drop`) while a compile
    of it was under way: what it prepared is thrown away, and it starts over
    from the store (bot/cluster/wikilock.py)."""

    reason = "was erased during its compile: starting over"


class StorageError(SoulbotError):
    """data_dir or the database in it cannot be used (an operator's fault: a
    corrupt, locked or read-only database, a data_dir that is missing and
    cannot be made, cannot be written, or is a file). `path` names the file or
    folder (or, for PostgreSQL, the server, its password left out); the message
    says why and what to do. `soulbot run` exits 2 on it."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path


class StoreUnavailable(StorageError):
    """A call to the store failed for a reason that passes: PostgreSQL's
    statement or lock timeout, a connection lost. The same call may succeed
    later (a chat turn apologises; its message is kept for the next one)."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(path, f"did not answer ({reason}); soulbot tries again at the next call")
        self.reason = reason


class DataDirInUse(SoulbotError):
    """Another soulbot daemon holds `data_dir`; `where` names it (the folder, and
    its instance), `pid` is its process id (as it wrote it, or "unknown")."""

    def __init__(self, data_dir: object, pid: str) -> None:
        super().__init__(
            f"{data_dir} is in use by another soulbot (pid {pid}): stop it first, or give "
            "this one a data_dir of its own"
        )
        self.where = str(data_dir)
        self.pid = pid


class TopologyConflict(SoulbotError):
    """This process's config disagrees with a live process on the same shared
    store (bot/cluster/topology.py); the message names both and the conflict."""


class AdapterStartError(SoulbotError):
    """An adapter could not connect; the message says why and what to check,
    and never holds a secret."""


class SpeechError(SoulbotError):
    """A reply could not be spoken: the speech service failed or refused, or
    its audio could not be read. The message says which, never a secret."""
