"""Taking back an answer (`/retry`, `/undo`: docs/commands.md): which exchange
is the last of a conversation, and what taking it back may answer.

The last exchange is the newest reply the history stores (delivered, and
stored: not a line that said a turn failed) with the person's messages it
answered (those after the reply before it). A row the soul wrote unasked (a
reminder) answers nothing: it is neither. Whom it answered is the person
whose message it replied to (the session's reply address); when messages came
after it that no stored reply answers, who spoke is not known for sure, and
only an admin may take it back in a group. The session runs a take-back in its
ordered worker, after the turns waiting: it never races a turn in flight, and
"the last answer" is the newest one when it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from bot.chat.history import Entry
from bot.memory.service import Said
from bot.types import Outbound

# What a take-back did: `none` (no answer to take back), `refused` (the answer
# was to someone else), `retried`, `failed` (the old answer went, the new one
# failed: its line said why), `undone`, `gone` (the conversation was forgotten
# or reset meanwhile).
Outcome = Literal["none", "refused", "retried", "failed", "undone", "gone"]
# Whether the caller may take back an answer to `user_id` (None: not known).
May = Callable[[str | None], bool]
# Edits the bot's messages (their ids) into a new reply; returns its messages' ids.
Replace = Callable[[Outbound, Sequence[str]], Awaitable[Sequence[str] | None]]
# Deletes the bot's messages (their ids) in a chat; returns how many went.
Delete = Callable[[Outbound, Sequence[str]], Awaitable[int]]


@dataclass(frozen=True)
class Exchange:
    """The last exchange: the reply, the person's messages it answered (oldest
    first), and whether messages came after it that no stored reply answers."""

    reply: Entry
    asked: tuple[Entry, ...]
    followed: bool

    @property
    def since(self) -> float:
        """When it began: its first message."""
        return min(e.ts for e in self.asked)

    def said(self) -> list[Said]:
        """Its rows (the person's messages, then the reply), as memory takes
        them back (`Memory.take_back`)."""
        return [Said(e.role, e.text, e.ts) for e in (*self.asked, self.reply)]

    def said_of(self, ids: set[int]) -> list[Said]:
        """`said` of the person's messages among `ids` alone."""
        return [Said(e.role, e.text, e.ts) for e in self.asked if e.id in ids]

    def ids(self) -> list[int]:
        return [*(e.id for e in self.asked), self.reply.id]


def last_exchange(entries: Sequence[Entry]) -> Exchange | None:
    """The last exchange of `entries` (a history in order), or None when no
    reply stored and delivered is there, or the messages it answered are
    compacted already."""
    # A reply answers messages (its `reply_to`); a row the soul wrote unasked (a
    # reminder, a check-in: `Session.keep_unprompted`) answers none, and is no
    # exchange's end nor the start of the next.
    replies = [e for e in entries if e.role == "assistant" and e.reply_to is not None]
    if not replies:
        return None
    reply = replies[-1]
    if not reply.delivered or reply.id < 0 or reply.reply_to is None:
        return None
    before = (replies[-2].reply_to or 0) if len(replies) > 1 else 0
    asked = tuple(e for e in entries if e.role == "user" and before < e.id <= reply.reply_to)
    if not asked:  # what it answered was compacted into the summary
        return None
    followed = any(e.role == "user" and e.id > reply.reply_to for e in entries)
    return Exchange(reply, asked, followed)


def unanswered(entries: Sequence[Entry]) -> tuple[Entry, ...]:
    """The person's messages of `entries` (a history in order) after the last
    that a stored reply answers: those a failed turn (or a failed `/retry`)
    left without an answer, which `/retry` answers."""
    last = max((e.reply_to or 0 for e in entries if e.role == "assistant"), default=0)
    return tuple(e for e in entries if e.role == "user" and e.id > last)


@dataclass(frozen=True)
class Taken:
    """How a take-back went: its outcome, and how many pages of the group's
    wiki made of the exchange stay (a member's take-back leaves them: they
    hold what others said too)."""

    outcome: Outcome
    kept: int = 0


@dataclass
class Job:
    """A take-back waiting for the session's worker: `/undo` or `/retry`, who
    may, whether the caller is an admin (who may drop a group's pages), and
    the future its command awaits."""

    undo: bool
    may: May
    done: asyncio.Future[Taken]
    admin: bool = False
    kept: int = field(default=0)
