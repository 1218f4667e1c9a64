"""Sessions: one per session key, one turn at a time, in order.

A message is stored in the history the moment it arrives, so a failed model
call or a restart loses nothing. Messages that arrive while a turn runs are
answered together in the next turn. After a turn, a history over
`history_token_budget` has its oldest chunk (about half the budget) compacted
by the model into a summary, so the cached prefix survives most turns. Idle
sessions leave memory and come back from SQLite.

A group chat's lines not addressed to the bot (bot/chat/context.py) go to the
next turn of their session. A message's images (bot/chat/media.py) wait,
not downloaded, for its turn (the newest `media.max_images` of those waiting;
each counts as a message against the rate limit, and a voice note one a
started minute: bot/chat/voice.py), are downloaded when it
starts and go to the model in that turn only; its history row and its memory
trace keep a placeholder, with the line the model began its answer with ("[seen: ...]",
not sent). The reply streams where the adapter can (`ReplyStream`): what is
shown becomes the final reply, or the line that says the turn failed; the
history stores the final text only. A turn cancelled mid-answer (`/forget`, a
shutdown past its deadline) aborts its stream: its preview is taken away, as
nothing of the turn is stored.

A reply is stored, then sent: "stored" is not "delivered". Once the platform
took it, the row is marked delivered, with the platform ids of its messages
(`HistoryStore.delivered`), so a reply to one is known after a restart. A reply
stored and never delivered (a crash between the two, a send that failed) is
sent at the next start by `recover`, its stored text as it is: no new model call.
Turns and `recover` run under the session's lease (bot/cluster/leases.py): a
recovery skips a session whose turn runs, here or in another process sharing
the store, so no message is answered twice. A turn that waited for another
process's lease reads the history from the store again before it asks the
model: what that process said meanwhile is not in this one's copy.

A turn whose messages all came through ambient mode's gate (bot/chat/ambient.py:
nobody addressed the bot) is an unprompted reply, ledgered as `ambient_reply`;
when it fails or the model says nothing, nothing is sent (`ambient.reply_dropped`):
no apology for a reply nobody asked for.

A session keeps the soul version its cache was written with while the cache is
warm (`Agent.soul`), so a heartbeat write of SOUL.md costs it nothing; it takes
the live version when idle past the cache's lifetime, after an operator's
reload, at /reset and at a compaction (the prefix is written again then anyway).

In a per-member place (`memory: per-member`, bot/chat/places.py) a message's
trace goes to its speaker's `member` scope of the server, and a turn reads the
memory of its one speaker; a turn that answers several people (a batch) reads
the shared wiki alone. The soul's replies there are kept in no scope: a reply in
a channel is written from everyone's lines, and a member's scope holds only
what that member said.

A conversation is said under one soul and one memory scope: when the route's
soul or scope is no longer the one its history was said under (the config's
binding changed), the session starts a new history, as /reset does, so neither
the new soul's turns nor its heartbeat read what was said under the old one. A
history whose binding was never recorded (stored by an earlier version) starts
anew too: under which binding it was said is not known.

`/retry` and `/undo` (bot/chat/takeback.py) take the conversation's last
exchange back in the same worker, after the turns waiting, so they never race a
turn: `/retry` answers the same messages anew into the old reply's messages
(`SessionParts.replace`), `/undo` takes the exchange out of the history, memory
and the chat (`SessionParts.delete`). A take-back waiting when the worker is
cancelled answers `gone`.

A conversation has a mood (`mood`): its soul's `defaultMood` until the model
moves it to another of the soul's `allowedMoods` with `set_mood`
(bot/chat/moods.py), kept in the store, so a restart keeps it; `/reset` (and a
new binding) takes it back to the default, and so does a soul reload that takes
the mood out of allowedMoods (at the next turn). Each change is one
`mood.changed` line (soul, session, from, to, reason), never a message's text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from structlog.contextvars import bound_contextvars

from bot import prompts
from bot.chat.context import ChannelContext
from bot.chat.history import Entry, HistoryStore, Snapshot, count_tokens
from bot.chat.limits import RateLimit
from bot.chat.media import (
    Pictured,
    download,
    holding_seen,
    keep,
    keep_newest,
    refusal,
    split_seen,
    unkeep,
)
from bot.chat.moods import set_mood_tool
from bot.chat.places import member_route
from bot.chat.reminders import Reminders
from bot.chat.takeback import (
    Delete,
    Exchange,
    Job,
    May,
    Outcome,
    Replace,
    Taken,
    last_exchange,
    unanswered,
)
from bot.chat.turn import Agent, CachedSoul
from bot.chat.voice import weight as voice_weight
from bot.chat.voicing import Spoken, Voicing
from bot.cluster.leases import Leases
from bot.config.schema import MediaConfig
from bot.errors import BudgetExceeded, ModelError, ModelRejected
from bot.model.usage import Source
from bot.soul.persona import Persona
from bot.soul.prompt import current_mood
from bot.types import Inbound, Outbound, ReplyStream, Route, Scope, Tool, VoiceNote

if TYPE_CHECKING:
    from bot.memory.service import Memory, Said

log = structlog.get_logger(__name__)

# Sends a reply; returns the platform ids of its messages (None: not known).
Send = Callable[[Outbound], Awaitable[Sequence[str] | None]]
# The typing indicator of the chat a message came from, shown while a turn runs.
Typing = Callable[[Inbound], AbstractAsyncContextManager[None]]
# A reply streamed into the chat an Outbound addresses, or None where it is sent whole.
Stream = Callable[[Outbound], ReplyStream | None]


def reply_to(inbound: Inbound, text: str, cause: str | None = None) -> Outbound:
    """A reply in the chat (and thread) of `inbound`, quoting it; `cause`: why
    the turn failed, when `text` is the apology for it (`Outbound.cause`)."""
    return Outbound(inbound.platform, inbound.chat_id, text, inbound.thread_id,
                    inbound.message_id or None, cause=cause)  # fmt: skip


def internal_cause(exc: BaseException, where: str) -> str:
    """The cause of a failure of our own (a bug) for an operator: its class
    only (its text may quote anything); the log has the traceback."""
    return f"internal error in {where}: {type(exc).__name__} (the log has the traceback)"


async def send_safely(send: Send, message: Outbound) -> list[str]:
    """Send `message`; returns its messages' ids. A failure is logged as
    `adapter.error`, never raised (no ids then)."""
    try:
        return list(await send(message) or [])
    except Exception as exc:
        log.error("adapter.error", platform=message.platform,
                  error=f"{type(exc).__name__}: {exc}")  # fmt: skip
        return []


def _compaction_cut(entries: list[Entry], budget: int, foldable: int) -> int:
    """How many of the oldest entries to fold so about half the budget remains:
    at most the first `foldable` (what comes after waits for its turn), ending
    before a user entry (the kept history starts with one) or with all of them,
    so an exchange larger than the budget is folded too; 0 for none."""
    if sum(e.tokens for e in entries) <= budget:
        return 0
    target = sum(e.tokens for e in entries) - budget // 2
    folded, cut = 0, foldable
    for i, entry in enumerate(entries[:foldable]):
        folded += entry.tokens
        if folded >= target:
            cut = i + 1
            break
    while cut < foldable and entries[cut].role != "user":
        cut += 1
    return cut


@dataclass
class _Turn:
    """One turn's messages and what goes with them: the message it replies
    to, when it started, the group's unaddressed lines, the images by entry
    (emptied once their rows have their lasting text), the reply's stream,
    how many images newer ones left out, and the cause of its failure."""

    new: list[Entry]
    target: Inbound
    started: float
    context: list[str]
    pictured: dict[int, Pictured]
    stream: ReplyStream | None
    left_out: int = 0
    cause: str | None = None
    """Why the turn failed, when it did (`Outbound.cause`)."""
    source: Source = "turn"
    """`ambient_reply` when every message of the turn came through ambient mode's gate."""

    def on_text(self) -> Callable[[str], Awaitable[None]] | None:
        """What the model's stream is told: the answer so far, shown without
        the "[seen: ...]" line that answers to images begin with."""
        stream = self.stream
        if stream is None:
            return None
        pictured = any(p.images for p in self.pictured.values())

        async def show(text: str) -> None:
            if pictured:
                if holding_seen(text):
                    return
                text = split_seen(text)[1]
            if text.strip():
                await stream.update(text)

        return show

    def answerable(self) -> bool:
        """Whether the turn has something to answer: a message with text, or an image that came."""
        return any(
            e.id not in self.pictured or self.pictured[e.id].caption or self.pictured[e.id].images
            for e in self.new
        )


@dataclass(frozen=True)
class SessionParts:
    """What every session works with: the history store, the agent, the
    adapters' send and typing, the history budget, memory, the hook told of
    every answered turn and the one told of sessions about to be forgotten."""

    store: HistoryStore
    agent: Agent
    send: Send
    typing: Typing
    history_budget: int
    memory: Memory | None = None
    on_turn: Callable[[Route], None] | None = None
    on_forget: Callable[[list[str]], Awaitable[None]] | None = None
    rate: RateLimit | None = None
    stream: Stream | None = None
    context: ChannelContext | None = None
    media_dir: Path | None = None
    """Where images are kept after their turn (`media.keep`); None: nowhere."""
    media: MediaConfig = field(default_factory=MediaConfig)
    """How many images a turn takes, how long a download may take (`media:`)."""
    leases: Leases | None = None
    """Who answers a conversation among processes (bot/cluster/leases.py); None: this one."""
    voicing: Voicing | None = None
    """Which answers are spoken (bot/chat/voicing.py); None: none."""
    on_reply: Callable[[Route, str], None] | None = None
    """Told of every reply stored, with its text (ambient mode's window of the channel)."""
    replace: Replace | None = None
    """Edits a reply sent into a new one (`/retry`); None: the new one is sent."""
    delete: Delete | None = None
    """Deletes the bot's messages (`/undo`); None: they stay in the chat."""
    reminders: Reminders | None = None
    """The reminder tools every turn is offered (bot/chat/reminders.py); None: none."""


def senders(
    entries: Sequence[Entry], answered: Mapping[int, str], who: str | None
) -> dict[int, str]:
    """Who sent each of `entries`: as the session saw it when a turn answered
    them (`answered`), else `who` (the person of the newest one, when known);
    an entry whose sender is known neither way is left out."""
    of = {e.id: answered.get(e.id) or who for e in entries}
    return {entry: sender for entry, sender in of.items() if sender is not None}


class Session:
    """One conversation. `receive` stores a message and wakes the worker task."""

    def __init__(self, route: Route, snapshot: Snapshot, parts: SessionParts) -> None:
        self.route = route
        self._parts = parts
        self._generation = snapshot.generation
        self._binding = snapshot.binding
        self._summary = snapshot.summary
        self._entries = snapshot.entries
        users = [e.id for e in self._entries if e.role == "user"]
        # Rows stored before a restart are context for the next turn, not a turn of their own.
        self._attempted = max(users, default=0)
        self._breakpoint: int | None = None
        self._soul: CachedSoul | None = None  # the soul version the cached prefix holds
        self._mood = snapshot.mood  # the mood it moved to with set_mood; None: the default
        self._latest: Inbound | None = None
        self._received: dict[int, float] = {}
        self._speakers: dict[int, str] = {}  # who sent each message no turn has answered yet
        # Who sent each message a turn answered, of those the history still holds: whose
        # member scopes `/undo` takes it out of in a per-member place (in memory only).
        self._answered: dict[int, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._deferred: asyncio.TimerHandle | None = None  # a start the rate limit put off
        self._unsaved: list[Entry] = []  # replies sent whose store failed, oldest first
        self._unsent: list[Entry] = []  # replies stored and never sent, for `recover`
        self._pictured: dict[int, Pictured] = {}  # images waiting for their turn, by entry
        self._left_out = 0  # images waiting that newer ones pushed out, for the next turn to say
        self._provisional = 0  # their ids: negative, never a row's
        self._leased = False  # whether this session may hold its lease (released after work)
        self._elsewhere: set[int] = set()  # messages newer than `_attempted` another process took
        self._unprompted: set[int] = set()  # messages ambient mode's gate let through, by entry
        self._jobs: list[Job] = []  # /retry and /undo waiting for the worker, in order
        self.last_active = time.monotonic()

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    @property
    def mood(self) -> str | None:
        """The mood this conversation is in (what its next turn's prompt says,
        and what speech may take its voice from): the one it moved to with
        `set_mood` while the soul allows it, else the soul's `defaultMood`;
        None without either (or while its soul is not loaded and it never moved)."""
        return self._parts.agent.mood(self.route, self._soul, self._mood)

    def _mood_changed(self, was: str | None, to: str | None, reason: str) -> None:
        log.info("mood.changed", soul=self.route.soul, session=self.route.session,
                 reason=reason, to=to, **{"from": was})  # fmt: skip

    async def _set_mood(self, persona: Persona, mood: str | None, reason: str) -> None:
        """Move to `mood` (None: the default) under `persona` and keep it.
        Raises what the store raised (nothing changed then)."""
        was = current_mood(persona, self._mood)
        await self._parts.store.set_mood(self.route.session, self.route.soul, mood)
        self._mood = mood
        self._mood_changed(was, current_mood(persona, mood), reason)

    def _mood_tools(self, persona: Persona | None) -> list[Tool]:
        """`set_mood` for a turn under `persona`, when it has allowedMoods."""
        if persona is None or not persona.allowed_moods:
            return []

        async def change(mood: str) -> None:
            await self._set_mood(persona, mood, "set_mood")

        return [set_mood_tool(persona, lambda: current_mood(persona, self._mood), change)]

    async def _mood_allowed(self, persona: Persona, shown: str | None) -> None:
        """After a reload took the mood it moved to out of allowedMoods (the
        turn's prompt `shown` another), go back to the default, once."""
        if self._mood is None or shown == self._mood:
            return
        was, self._mood = self._mood, None
        self._mood_changed(was, shown, "no longer in allowedMoods")
        try:
            await self._parts.store.set_mood(self.route.session, self.route.soul, None)
        except Exception as exc:  # the row is ignored while the soul does not allow it
            log.warning("history.write_failed", error_class=type(exc).__name__,
                        error=str(exc), what="mood")  # fmt: skip

    async def receive(
        self,
        inbound: Inbound,
        text: str,
        pictured: Pictured | None = None,
        start: bool = True,
        unprompted: bool = False,
    ) -> bool:
        """Store a user message (`text`, its history row; with `pictured`, its
        images wait in memory for its turn) and, with `start`, make sure a turn
        will answer it (without: the message received next starts it); False
        (and nothing done) when its platform message id was delivered before.
        `unprompted`: not addressed to the bot, let through by ambient mode's
        gate (a turn of such messages only is an unprompted reply: module
        docstring). Raises what the store raised (nothing done then)."""
        self.last_active = time.monotonic()
        address = inbound.address()
        entry = await self._parts.store.append_message(
            self.route.session, self._generation, text, inbound.message_id, address
        )
        if entry is None:
            return False
        self._entries.append(entry)
        self._received[entry.id] = time.perf_counter()
        self._speakers[entry.id] = inbound.user_id
        self._latest = inbound
        if unprompted:
            self._unprompted.add(entry.id)
        weight = voice_weight(inbound) if inbound.spoken else 1
        if pictured is not None and pictured.media:
            self._pictured[entry.id] = pictured  # its trace waits for the model's note
            self._left_out += keep_newest(self._pictured, self._parts.media.max_images)
            weight = len(pictured.media)
        else:
            trace = pictured.placeholder() if pictured is not None else inbound.text
            self._remember(inbound.user_id, inbound.user_name, trace)
        if not start:
            return True
        wait, tell = 0.0, False
        if self._parts.rate is not None and inbound.platform != "console":
            wait, tell = self._parts.rate.admit(f"{inbound.platform}:{inbound.user_id}", weight)
        if tell:
            log.info("limits.rate", user_id=inbound.user_id, wait_s=round(wait, 1))
            await send_safely(self._parts.send, reply_to(inbound, prompts.SLOW_DOWN))
        if wait:  # stored; answered by the turn running now, or when there is room
            if not self.busy and self._deferred is None:
                self._deferred = asyncio.get_running_loop().call_later(wait, self._start)
        else:
            self._start()
        return True

    def recent(self, count: int) -> list[Entry]:
        """The newest `count` entries of the history (stored ones only)."""
        return [e for e in self._entries if e.id > 0][-count:]

    async def keep_unprompted(self, text: str, ids: list[str]) -> None:
        """Keep a message the soul sent unasked (a reminder; its platform ids
        `ids`) in the history, so the next turn reads it, when the history
        holds a message to follow; a failed write is logged, nothing raised."""
        if not any(e.role == "user" for e in self._entries):
            return  # a history must start with a person's message
        try:
            entry = await self._parts.store.append(
                self.route.session, self._generation, "assistant", text
            )
            await self._parts.store.record_sent(self.route.session, ids, text)
        except Exception as exc:
            log.warning("history.write_failed", error_class=type(exc).__name__,
                        error=str(exc), what="reminder")  # fmt: skip
            return
        self._entries.append(entry)

    def _remember(self, speaker: str | None, name: str, text: str) -> None:
        """Keep a person's message as a trace of the session's scope; in a
        per-member place, of its speaker's `member` scope (none when who spoke
        is not known)."""
        route = member_route(self.route, speaker)
        if self._parts.memory is not None and route is not None:
            self._parts.memory.record(route, "user", name, text)

    def _reader(self, new: Sequence[Entry]) -> Route:
        """The route a turn's memory is read with: the session's; in a
        per-member place, the `member` route of the one person whose messages
        the turn answers, or the place's own (the shared wiki alone) when it
        answers several people, or someone not known (a message stored before a
        restart)."""
        speakers = {self._speakers.get(e.id) for e in new}
        route = member_route(self.route, speakers.pop()) if len(speakers) == 1 else None
        return route or self.route

    def _asker(self, new: Sequence[Entry], target: Inbound) -> Inbound | None:
        """Whom a turn's reminder tools act for (and whose clock it is given:
        their time zone, once known): the person of `target` (the
        newest message) in a DM, or when every message the turn answers is
        theirs; None when it answers several people, or someone not known (a
        message stored before a restart): the tools refuse then (WHO_UNKNOWN)."""
        if self.route.is_dm:
            return target
        speakers = {self._speakers.get(e.id) for e in new}
        return target if speakers == {target.user_id} else None

    def recover(self, inbound: Inbound) -> bool:
        """Answer what a crash left unanswered, replying to `inbound` (the
        newest message's address, as stored): the replies stored after the last
        one delivered are sent as they are, then the messages after the last
        one replied to get a turn. False, and nothing done, while a turn runs:
        it answers what is waiting itself. Call holding the session's lease
        (`SessionParts.leases`), when there is one: the work releases it."""
        if self.busy:
            return False
        self._leased = self._parts.leases is not None
        replies = [e for e in self._entries if e.role == "assistant"]
        self._attempted = max((e.reply_to for e in replies if e.reply_to), default=0)
        self._elsewhere = set()
        sent = max((i for i, e in enumerate(replies) if e.delivered), default=-1)
        self._unsent = replies[sent + 1 :]
        self._latest = inbound
        self._start()
        return True

    def _start(self) -> None:
        """Start the worker unless it runs (a deferred start ends here too)."""
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
        if not self.busy:
            self._task = asyncio.create_task(self._work(), name=f"session:{self.route.session}")

    def stop_deferred(self) -> None:
        """Forget a start the rate limit put off (the session is going away)."""
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None

    async def rebind(self, route: Route) -> None:
        """Go on under `route`: a soul or scope other than the history's starts
        a new history (see the module docstring); an empty one is only bound."""
        binding = (route.soul, route.scope)
        if binding == self._binding:
            self.route = route
            return
        if not self._entries and self._summary is None:
            await self._parts.store.bind(route.session, binding)
            self.route, self._binding = route, binding
            return
        log.info("session.rebound", session=route.session, soul=route.soul, scope=route.scope,
                 was=list(self._binding) if self._binding else None)  # fmt: skip
        await self.reset(route)

    async def reset(self, route: Route | None = None) -> None:
        """Answer what is pending, then start a new, empty history (under
        `route`, when given)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        was, chosen = self.mood, self._mood
        self.route = route or self.route
        binding = (self.route.soul, self.route.scope)
        self._generation = await self._parts.store.reset(self.route.session, binding)
        self._binding = binding
        self._entries, self._summary, self._breakpoint = [], None, None
        self._soul = None
        self._mood = None  # the store's reset dropped it too
        if chosen is not None:
            self._mood_changed(was, self.mood, "reset")
        self._unsaved, self._unsent = [], []
        self._pictured = {}
        self._speakers, self._answered = {}, {}
        self._left_out = 0
        self._attempted = 0
        self._elsewhere = set()
        self._unprompted = set()

    async def _work(self) -> None:
        try:
            while True:
                try:
                    await self._rounds()
                finally:
                    if self._leased and self._parts.leases is not None:
                        self._leased = False
                        await self._parts.leases.release(self.route.session)
                if self._waiting() is None and not self._jobs:  # none came meanwhile
                    return
        finally:  # cancelled (`/forget`, a shutdown): a take-back waiting has nothing left
            for job in self._jobs:
                if not job.done.done():
                    job.done.set_result(Taken("gone"))
            self._jobs = []

    def _waiting(self) -> tuple[list[Entry], Inbound] | None:
        """The messages no turn has taken yet and the message to reply to
        (the newest), or None when there are none."""
        new = [
            e
            for e in self._entries
            if e.role == "user" and e.id > self._attempted and e.id not in self._elsewhere
        ]
        return (new, self._latest) if new and self._latest is not None else None

    async def _lease(self) -> None:
        """Claim (or renew) the session's lease before a round of work,
        waiting while another process holds it (bot/cluster/leases.py); when it
        did, the history is read again (`_reload`): that process may have said
        more in the conversation meanwhile, and a turn answers from all of it."""
        if self._parts.leases is not None:
            self._leased = True
            if await self._parts.leases.acquire(self.route.session):
                await self._reload()

    async def _reload(self) -> None:
        """Take the history from the store again. The messages waiting here stay
        waiting (those another process took are not), and so do the replies
        whose store failed; the cached prefix is written again. When the load
        fails (`history.reload_failed`), the copy in memory stays."""
        mine = {e.id for e in self._entries if e.role == "user" and e.id > self._attempted}
        try:
            snapshot = await self._parts.store.load(self.route.session)
        except Exception as exc:
            log.warning("history.reload_failed", error_class=type(exc).__name__, error=str(exc))
            return
        stored = {e.id for e in snapshot.entries}
        kept = [e for e in self._entries if e.id < 0 or (e.id in mine and e.id not in stored)]
        self._entries = sorted([*snapshot.entries, *kept], key=lambda e: e.order)
        self._elsewhere = {
            e.id
            for e in snapshot.entries
            if e.role == "user" and e.id > self._attempted and e.id not in mine
        }
        self._generation, self._summary = snapshot.generation, snapshot.summary
        self._binding = snapshot.binding
        self._breakpoint = self._soul = None
        log.info("session.reloaded", entries=len(self._entries), elsewhere=len(self._elsewhere))

    async def _rounds(self) -> None:
        if self._unsent and self._latest is not None:
            await self._lease()
            with bound_contextvars(soul=self.route.soul, session=self.route.session):
                await self._send_unsent(self._latest)
        while (waiting := self._waiting()) is not None or self._jobs:
            if waiting is None:  # the turns waiting first: "the last answer" is the newest
                await self._lease()
                with bound_contextvars(soul=self.route.soul, session=self.route.session):
                    await self._run_job(self._jobs.pop(0))
                continue
            await self._lease()  # the messages that come meanwhile join the turn
            new, target = self._waiting() or waiting
            self._attempted = new[-1].id
            with bound_contextvars(soul=self.route.soul, session=self.route.session):
                try:
                    await self._turn(new, target)
                except Exception as exc:  # the dispatch boundary: log, answer, never kill the loop
                    log.exception("session.error")
                    cause = internal_cause(exc, "the session")
                    await send_safely(self._parts.send, reply_to(target, prompts.APOLOGY, cause))
                try:
                    await self._compact()
                except Exception as exc:  # the answer is out; the history waits for the next try
                    log.exception("history.compact_failed", error=str(exc))
            self.last_active = time.monotonic()

    async def _send_unsent(self, target: Inbound) -> None:
        """Send the replies stored and never sent (`recover`), oldest first, in
        reply to `target`; each is tried once (a failure is logged)."""
        unsent, self._unsent = self._unsent, []
        for entry in unsent:
            try:
                ids = list(await self._parts.send(reply_to(target, entry.text)) or [])
            except Exception as exc:
                log.error("adapter.error", platform=target.platform,
                          error=f"{type(exc).__name__}: {exc}")  # fmt: skip
                continue
            log.info("sessions.reply_sent_late", entry=entry.id)
            await self._delivered(entry, ids)

    async def _delivered(self, entry: Entry, ids: list[str]) -> None:
        """Mark the reply `entry` delivered (its messages' platform ids kept): in
        the store, or, for a reply whose store failed, in the entry stored later."""
        done = replace(entry, delivered=True)
        self._entries = [done if e is entry else e for e in self._entries]
        session = self.route.session
        try:
            if entry.id < 0:
                self._unsaved = [done if e is entry else e for e in self._unsaved]
                await self._parts.store.record_sent(session, ids, entry.text)
            else:
                await self._parts.store.delivered(session, entry.id, ids, entry.text)
        except Exception as exc:  # the reply is out; a restart may send it again
            log.warning("history.write_failed", error_class=type(exc).__name__,
                        error=str(exc), what="delivered")  # fmt: skip

    async def store_unsaved(self) -> int:
        """Try the replies a failed write left provisional again (the shutdown:
        a reply not stored would be answered again at the next start); returns
        how many are still not stored."""
        await self._store_unsaved()
        return len(self._unsaved)

    async def _turn(
        self, new: list[Entry], target: Inbound, replacing: list[str] | None = None
    ) -> None:
        """Answer `new`, in reply to `target`; with `replacing` (`/retry`), the
        answer goes into those messages of the bot (edited: not streamed nor
        spoken), and a failure's line is sent beside them."""
        await self._store_unsaved()
        route, generation = self.route, self._generation
        fresh = {e.id for e in new}
        history = [e for e in self._entries if e.id not in fresh]
        context = self._parts.context
        voicing = self._parts.voicing if replacing is None else None
        spoken = voicing.plan(route, target) if voicing is not None else None
        streams = self._parts.stream is not None and not (spoken and spoken.only)
        streams = streams and replacing is None
        turn = _Turn(
            new, target, time.perf_counter(),
            context.take(route.session) if context is not None and not route.is_dm else [],
            {e.id: self._pictured.pop(e.id) for e in new if e.id in self._pictured},
            self._parts.stream(reply_to(target, "")) if self._parts.stream and streams else None,
            self._left_out,
        )  # fmt: skip
        self._left_out = 0
        if fresh <= self._unprompted:
            turn.source = "ambient_reply"
        self._unprompted -= fresh
        try:
            with bound_contextvars(messages=len(new)):
                text, stored = await self._answer(route, generation, history, turn)
            held = {e.id for e in self._entries}
            self._answered = {k: v for k, v in self._answered.items() if k in held}
            for entry in new:
                self._received.pop(entry.id, None)
                speaker = self._speakers.pop(entry.id, None)
                if speaker is not None:
                    self._answered[entry.id] = speaker
            if turn.source == "ambient_reply" and stored is None:
                # Nobody asked: a failure or an empty answer is silence, never a line.
                log.warning("ambient.reply_dropped", cause=turn.cause or "no answer")
                if turn.stream is not None:
                    await turn.stream.abort()
                return
            message = reply_to(target, text, turn.cause)
            voiced = spoken if stored is not None else None  # a failure's line is never spoken
            ids = None
            if voiced is not None and voiced.only and stored is not None:
                ids = await self._send_spoken(voiced, target, message, stored.text)
            try:
                if ids is None and replacing and stored is not None and self._parts.replace:
                    ids = list(await self._parts.replace(message, replacing) or [])
                elif ids is None and turn.stream is None:
                    ids = list(await self._parts.send(message) or [])
                elif ids is None and turn.stream is not None:
                    ids = await turn.stream.finish(message)
            except Exception as exc:  # stored, not delivered: the next start sends it
                log.error("adapter.error", platform=message.platform,
                          error=f"{type(exc).__name__}: {exc}")  # fmt: skip
                return
        except asyncio.CancelledError:
            if turn.stream is not None:  # no preview outlives its turn
                await turn.stream.abort()
            raise
        if stored is not None:
            await self._delivered(stored, ids or [])
            if voiced is not None and not voiced.only:
                await self._speak_beside(voiced, target, stored.text)

    async def _say(self, spoken: Spoken, target: Inbound, text: str) -> VoiceNote | None:
        """`text` as a voice note (None when speech failed), "typing" shown meanwhile."""
        if self._parts.voicing is None:
            return None
        async with self._parts.typing(target):
            return await self._parts.voicing.speak(spoken, self.route, text, self.mood)

    async def _send_spoken(
        self, spoken: Spoken, target: Inbound, message: Outbound, text: str
    ) -> list[str] | None:
        """Send the answer `text` as a voice note alone (`voice.speech.mode: only`);
        the ids of its message, or None when it could not be made or sent (the
        text goes instead)."""
        note = await self._say(spoken, target, text)
        if note is None:
            return None
        try:
            return list(await self._parts.send(replace(message, text="", voice=note)) or [])
        except Exception as exc:
            log.error("adapter.error", platform=message.platform,
                      error=f"{type(exc).__name__}: {exc}")  # fmt: skip
            return None

    async def _speak_beside(self, spoken: Spoken, target: Inbound, text: str) -> None:
        """Send the answer `text`, delivered as text, as a voice note after it;
        its message's id is kept with the text (a reply to it quotes the text)."""
        note = await self._say(spoken, target, text)
        if note is None:
            return
        ids = await send_safely(self._parts.send, replace(reply_to(target, ""), voice=note))
        try:
            await self._parts.store.record_sent(self.route.session, ids, text)
        except Exception as exc:  # the note is out; a reply to it is read without its text
            log.warning("history.write_failed", error_class=type(exc).__name__,
                        error=str(exc), what="voice note")  # fmt: skip

    async def _store_reply(self, generation: int, text: str, reply_to: int) -> Entry:
        """Store the model's reply; when the store fails (a full disk, a lock
        timeout), a provisional entry keeps it in this session's history, it is
        still sent, and it is stored at the start of the next turn."""
        try:
            return await self._parts.store.append(
                self.route.session, generation, "assistant", text, reply_to, delivered=False
            )
        except Exception as exc:
            log.error("history.write_failed", error_class=type(exc).__name__, error=str(exc))
            self._provisional -= 1
            entry = Entry(self._provisional, "assistant", text, count_tokens(text), reply_to,
                          time.time(), delivered=False)  # fmt: skip
            self._unsaved.append(entry)
            return entry

    @property
    def unsaved(self) -> int:
        """Replies sent whose store failed and waits for another try."""
        return len(self._unsaved)

    async def _store_unsaved(self) -> None:
        """Store the replies a failed write left provisional, in order; stop at
        the first that still fails (the next turn, or the shutdown, tries again)."""
        while self._unsaved:
            entry = self._unsaved[0]
            try:
                stored = await self._parts.store.append(
                    self.route.session, self._generation, "assistant", entry.text,
                    entry.reply_to, entry.delivered,
                )  # fmt: skip
            except Exception as exc:
                log.warning("history.write_failed", error_class=type(exc).__name__,
                            error=str(exc), unsaved=len(self._unsaved))  # fmt: skip
                return
            self._unsaved.pop(0)
            self._entries = [stored if e is entry else e for e in self._entries]

    async def _answer(
        self, route: Route, generation: int, history: list[Entry], turn: _Turn
    ) -> tuple[str, Entry | None]:
        """The text to send for a turn and the reply stored of it: the model's
        reply, stored; or the line that says why there is none (nothing stored).
        The turn's memory is its reader's (`_reader`)."""
        log.info("turn.started")
        new, target, started = turn.new, turn.target, turn.started
        async with self._parts.typing(target):
            refused = await self._look(turn)
        if refused and not turn.answerable():  # the line that says why is the answer
            await self._describe(generation, turn.pictured, None)
            return refused, None
        if refused:
            await send_safely(self._parts.send, reply_to(target, refused))
        new = turn.new  # with the rows of images that did not come saying so
        images = {key: p.images for key, p in turn.pictured.items()}
        reader = self._reader(new)
        asker = self._asker(new, target)
        stored: Entry | None = None
        try:
            async with self._parts.typing(target):
                reminders = self._parts.reminders
                zone = await reminders.known_zone(asker) if reminders is not None else None
                prompt = await self._parts.agent.prompt(
                    reader, self._summary, history, new, self._breakpoint, self._soul,
                    turn.context, images, self._mood, zone,
                )  # fmt: skip
                persona = prompt.soul.version.soul.persona if prompt.soul else None
                if persona is not None:
                    await self._mood_allowed(persona, prompt.mood)
                tools = self._mood_tools(persona)
                if reminders is not None:
                    tools += reminders.tools(route, asker)
                reply = await self._parts.agent.turn(
                    reader, prompt, turn.on_text(), tools, turn.source
                )
        except BudgetExceeded as exc:
            text, turn.cause = prompts.DAILY_LIMIT, str(exc)
        except ModelRejected as exc:
            # Our request is at fault, not the service: an operator must look.
            log.error("turn.failed", error_class=exc.error_class, error=str(exc))
            text, turn.cause = prompts.MODEL_REJECTED, exc.cause
        except ModelError as exc:
            log.warning("turn.failed", error_class=exc.error_class, error=str(exc))
            text, turn.cause = prompts.APOLOGY, exc.cause
        except Exception as exc:
            log.exception("turn.failed", error_class=type(exc).__name__)
            text, turn.cause = prompts.APOLOGY, internal_cause(exc, "the turn")
        else:
            self._breakpoint, self._soul = prompt.breakpoint_id, prompt.soul
            seen, text = split_seen(reply.text) if turn.pictured else (None, reply.text)
            await self._describe(generation, turn.pictured, seen)
            if text and generation == self._generation:
                stored = await self._store_reply(generation, text, new[-1].id)
                self._entries.append(stored)
                # Messages that came during the turn go after the reply to their elders.
                self._entries.sort(key=lambda e: e.order)
                if self._parts.memory is not None and not Scope.parse(route.scope).per_member:
                    self._parts.memory.record(route, "assistant", "", text)
                if self._parts.on_turn is not None:
                    self._parts.on_turn(route)
                if self._parts.on_reply is not None:
                    self._parts.on_reply(route, text)
            if reply.cut:  # the answer ended at max_tokens: say so rather than stop mid-word
                log.warning("turn.cut", output_tokens=reply.usage.output_tokens)
                text += prompts.ANSWER_CUT
            if not text:
                log.warning("turn.empty")
                text = prompts.EMPTY_ANSWER
            first = self._received.get(new[0].id, started)
            log.info(
                "turn.completed",
                latency_ms=round((time.perf_counter() - first) * 1000, 1),
                model_ms=round(reply.model_ms, 1),
                queue_ms=round(reply.queue_ms, 1),
                calls=reply.calls,
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                cache_creation_input_tokens=reply.usage.cache_creation_input_tokens,
                cache_read_input_tokens=reply.usage.cache_read_input_tokens,
            )
        if turn.pictured:  # the turn failed, or no note came: the placeholders stay
            # (not on a cancel: /forget cancels a turn so that nothing is recorded after it)
            await self._describe(generation, turn.pictured, None)
        return text, stored

    async def _look(self, turn: _Turn) -> str:
        """Download the images of the turn's messages (bot/chat/media.py) and
        keep them (`media.keep`); a message none of whose images came has its
        row say so now, for the prompt. Returns the line that says what did
        not come ("" when all did)."""
        reasons = []
        if turn.left_out:
            reasons.append(prompts.IMAGES_LEFT_OUT.format(limit=self._parts.media.max_images,
                                                          count=turn.left_out))  # fmt: skip
        for entry_id, picture in turn.pictured.items():
            images, refused = await download(picture.media, self._parts.media)
            reasons += refused
            picture = turn.pictured[entry_id] = replace(picture, media=(), images=tuple(images))
            if images and self._parts.media_dir is not None:
                await keep(self._parts.media_dir, self.route.session, entry_id, images)
            if not images and (entry := await self._rewrite(entry_id, picture.row())):
                turn.new = [entry if e.id == entry_id else e for e in turn.new]
        return refusal(reasons) if reasons else ""

    async def _rewrite(self, entry_id: int, text: str) -> Entry | None:
        """Give the history row `entry_id` the text `text`; returns its entry."""
        try:
            await self._parts.store.update_text(entry_id, text)
        except Exception as exc:  # the row keeps its placeholder
            log.warning("history.write_failed", error_class=type(exc).__name__,
                        error=str(exc), what="image note")  # fmt: skip
        found = None
        for i, e in enumerate(self._entries):
            if e.id == entry_id:
                found = self._entries[i] = Entry(e.id, e.role, text, count_tokens(text),
                                                 e.reply_to, e.ts)  # fmt: skip
        return found

    async def _describe(
        self, generation: int, pictured: dict[int, Pictured], seen: str | None
    ) -> None:
        """Give the image messages of a turn their lasting text: the history
        row with the model's note (`seen`, when it wrote one), and the trace."""
        for entry_id, picture in pictured.items():
            if seen and picture.images and generation == self._generation:
                await self._rewrite(entry_id, picture.row(seen))
            self._remember(self._speakers.get(entry_id), picture.sender,
                           picture.placeholder(seen))  # fmt: skip
        if pictured:
            pictured.clear()

    async def _compact(self) -> None:
        entries = self._entries
        waiting = (i for i, e in enumerate(entries) if e.role == "user" and e.id > self._attempted)
        cut = _compaction_cut(entries, self._parts.history_budget, next(waiting, len(entries)))
        if cut == 0:
            return
        folded, generation = self._entries[:cut], self._generation
        try:
            summary = await self._parts.agent.summarize(self.route, self._summary, folded)
        except (BudgetExceeded, ModelError) as exc:
            log.warning("history.compact_failed", error=str(exc))
            return
        if generation != self._generation or not summary:
            return
        await self._parts.store.compact(
            self.route.session, generation, [e.id for e in folded], summary
        )
        self._entries = self._entries[cut:]
        self._summary = summary
        self._breakpoint = self._soul = None  # the prefix is written again: the live soul
        log.info("history.compacted", entries=cut)

    def take_back(self, undo: bool, may: May, admin: bool = False) -> asyncio.Future[Taken]:
        """Queue an `/undo` (`undo`) or a `/retry` of the conversation's last
        exchange (bot/chat/takeback.py) in the worker's order, after the
        messages received so far; `may` says whether the caller may take back
        an answer to whom it was; `admin`, whether the caller is an admin (only
        an admin's take-back drops the pages a group's wiki made of it). The
        future returned has how it went, or what the store or the memory raised
        (WikiBusy: nothing taken back then)."""
        job = Job(undo, may, asyncio.get_running_loop().create_future(), admin)
        self._jobs.append(job)
        self._start()
        return job.done

    async def _run_job(self, job: Job) -> None:
        try:
            outcome = await self._take_back(job)
        except asyncio.CancelledError:  # `/forget`, a shutdown: its command is answered
            job.done.set_result(Taken("gone"))
            raise
        except Exception as exc:  # the command says so
            job.done.set_exception(exc)
        else:
            job.done.set_result(Taken(outcome, job.kept))

    async def _take_back(self, job: Job) -> Outcome:
        """Run `job`: a `/retry` with messages no stored reply answers (a turn
        failed) answers them anew (`_answer_again`); else the last exchange is
        taken back, and a `/retry` asks again on its messages."""
        waiting = unanswered(self._entries)
        if not job.undo and waiting:
            return await self._answer_again(job, list(waiting))
        exchange = last_exchange(self._entries)
        address = await self._parts.store.reply_address(self.route.session)
        if exchange is None or address is None:
            return "none"
        target = Inbound.from_address(address[0])
        # Whom it answered: the person of the message it replied to, when the address
        # is that message's (an /undo before took the newer one out of the history).
        known = address[1] is not None and address[1] == exchange.asked[-1].ts
        who = target.user_id if known and not exchange.followed else None
        if not job.may(who):
            return "refused"
        session = self.route.session
        ids = await self._parts.store.reply_ids(session, exchange.reply.text, exchange.reply.ts)
        if job.undo:
            await self._unremember_each(job, exchange, who)
            await self._parts.store.take_back(session, exchange.ids(), ids)
            if self._parts.media_dir is not None:  # `media.keep`: its images go too
                await unkeep(self._parts.media_dir, session, exchange.ids())
        else:
            await self._unremember(job, exchange.said()[-1:], exchange.reply.ts, who)
            await self._parts.store.take_back(session, [exchange.reply.id], ids)
        gone = set(exchange.ids() if job.undo else [exchange.reply.id])
        self._entries = [e for e in self._entries if e.id not in gone]
        self._breakpoint = None  # the cached prefix may hold what went
        if job.undo:
            log.info("chat.undone", entries=len(gone), messages=len(ids), user_id=who)
            if ids and self._parts.delete is not None:
                await self._parts.delete(reply_to(target, ""), ids)
            return "undone"
        log.info("chat.retried", entries=len(gone), messages=len(ids), user_id=who)
        asked = list(exchange.asked)
        # Whose memory the new turn reads, and whose clock it is given.
        self._speakers.update(senders(asked, self._answered, who))
        await self._turn(asked, target, replacing=ids)
        last = asked[-1].id
        answered = any(e.role == "assistant" and e.reply_to == last for e in self._entries)
        return "retried" if answered else "failed"

    async def _answer_again(self, job: Job, waiting: list[Entry]) -> Outcome:
        """`/retry` after a turn that failed: answer `waiting` (the messages it
        left without an answer) in a new message, as that turn would have;
        nothing is edited nor taken back."""
        address = await self._parts.store.reply_address(self.route.session)
        if address is None:
            return "none"
        target = Inbound.from_address(address[0])
        known = address[1] is not None and address[1] == waiting[-1].ts
        who = target.user_id if known else None
        if not job.may(who):
            return "refused"
        log.info("chat.retried", entries=0, messages=0, user_id=who)
        self._speakers.update(senders(waiting, self._answered, who))  # as `_take_back`
        await self._turn(waiting, target)
        last = waiting[-1].id
        answered = any(e.role == "assistant" and e.reply_to == last for e in self._entries)
        return "retried" if answered else "failed"

    async def _unremember_each(self, job: Job, exchange: Exchange, who: str | None) -> None:
        """Take the exchange out of memory (`_unremember`): from the session's
        scope, or of `who` (whom it answered). In a per-member place, each of
        the person's messages from its sender's member scope (`senders`: one
        answer may answer several people; an admin may take back one whose
        person is not known); the reply is in no member scope."""
        until = exchange.reply.ts
        if not Scope.parse(self.route.scope).per_member:
            await self._unremember(job, exchange.said(), until, who)
            return
        of = senders(exchange.asked, self._answered, who)
        for speaker in sorted(set(of.values())):
            theirs = {entry for entry, sender in of.items() if sender == speaker}
            await self._unremember(job, exchange.said_of(theirs), until, speaker)

    async def _unremember(self, job: Job, said: list[Said], until: float, who: str | None) -> None:
        """Take `said` (rows of the last exchange, which ended at `until`) out
        of memory: the session's scope; in a per-member place, the member
        scope of whom it answered. A group's pages made of it go for an admin
        only (they hold what others said too); `job.kept` counts those kept."""
        route = member_route(self.route, who)
        if self._parts.memory is not None and route is not None:
            pages = job.admin or Scope.parse(route.scope).kind != "chat"
            job.kept += await self._parts.memory.take_back(route, said, until, pages)
