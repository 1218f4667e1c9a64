"""The composition root: the runtime's parts, wired together (database, ledger,
model client, speech, memory, reflector, agent, sessions, router, adapters).
`Runtime.open` opens them on an AsyncExitStack, so a failure half-way closes
what was opened; `close` closes them in the reverse order."""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field

import structlog

from adapters.base import Adapter
from bot.app.logs import away_from_the_chat
from bot.app.preflight import pick_default_soul
from bot.app.retention import Retention
from bot.chat.access import Access
from bot.chat.ambient import Ambient
from bot.chat.chat_places import ChatPlaces
from bot.chat.check_ins import CheckIns
from bot.chat.commands import Commands
from bot.chat.context import ChannelContext
from bot.chat.history import HistoryStore
from bot.chat.limits import RateLimit
from bot.chat.manager import SessionManager
from bot.chat.places import CONSOLE
from bot.chat.reflect import Reflector
from bot.chat.reminder_commands import ReminderCommands
from bot.chat.reminder_delivery import ReminderDelivery
from bot.chat.reminder_store import ReminderStore
from bot.chat.reminders import Reminders
from bot.chat.router import Router
from bot.chat.sessions import SessionParts
from bot.chat.turn import Agent
from bot.chat.voice import Hearing
from bot.chat.voicing import Voicing
from bot.chat.weblogin import WebAuth
from bot.cluster.cluster import Cluster
from bot.config.schema import Config
from bot.errors import AdapterStartError, SoulbotError
from bot.memory.compile import Compiler
from bot.memory.service import Memory
from bot.memory.store import TraceStore
from bot.model.client import ModelClient
from bot.model.usage import Ledger
from bot.soul.registry import SoulRegistry
from bot.soul.soullock import SoulLocks
from bot.storage.db import Database, store_target
from bot.types import Inbound, Outbound, ReplyStream, Retracts
from bot.voice.speech import Speech
from bot.voice.transcribe import Transcriber

log = structlog.get_logger(__name__)

FULL_GC_THRESHOLD = 100  # CPython's default is 10
MEDIA_FOLDER = "media"  # under data_dir: the images `media.keep` keeps
LOG_FILE = "logs/soulbot.log"  # under data_dir: the log while the terminal chat runs


def settle_gc() -> None:
    """Call once the runtime is open. Freeze what was loaded (it lives as long as
    the process: the collector need not scan it again), and make full
    collections ten times rarer than CPython's default: each scans every
    long-lived object (about 45 ms with 1,000 sessions in memory on a small VM),
    the largest single stall of turns under load (bench/turns.py)."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_GC_THRESHOLD)


@dataclass
class Runtime:
    """Everything a turn needs. Build with `Runtime.open`, end with `close`."""

    config: Config
    registry: SoulRegistry
    db: Database
    ledger: Ledger
    model: ModelClient
    memory: Memory
    sessions: SessionManager
    router: Router
    reflector: Reflector
    history: HistoryStore
    retention: Retention
    cluster: Cluster
    access: Access
    souls: SoulLocks
    web_login: WebAuth
    adapters: dict[str, Adapter] = field(default_factory=dict)
    reminders: ReminderDelivery | None = None
    """Delivers the reminders that came due (`tick`, every `reminders.poll_s`)."""

    _stack: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)

    @classmethod
    async def open(
        cls,
        config: Config,
        registry: SoulRegistry,
        adapters: Sequence[Adapter],
        clock: Callable[[], float] = time.time,
    ) -> Runtime:
        """Open the database and wire the parts; what was opened before a
        failure is closed again. `clock`: the reminders' time (tests move it).
        Raises SoulbotError."""
        default_soul = pick_default_soul(config, registry)
        async with AsyncExitStack() as stack:
            if any(adapter.name == CONSOLE for adapter in adapters):  # the chat owns the terminal
                stack.enter_context(away_from_the_chat(config.data_dir / LOG_FILE, config.log_level,
                                                       config.secrets()))  # fmt: skip
            db = Database(store_target(config.data_dir, config.store.url), config.store.timeouts())
            await db.open()
            stack.push_async_callback(db.close)
            ledger = Ledger(db, prices=config.model.prices, budget=config.budget,
                            admins=config.admins, instance=config.instance or "")  # fmt: skip
            model = ModelClient(config.model, ledger)
            stack.push_async_callback(model.close)
            cluster = Cluster(db, config)
            speech = Speech(config.voice.speech, ledger)
            stack.push_async_callback(speech.close)
            store = TraceStore(db)
            compiler = Compiler(store, model, max_tokens=config.memory.compile.max_tokens,
                                page_max_tokens=config.memory.page_max_tokens)  # fmt: skip
            memory = Memory(config.data_dir, registry, store, compiler,
                            config.memory.recall_token_budget, cluster)  # fmt: skip
            stack.push_async_callback(memory.close)
            by_name = {adapter.name: adapter for adapter in adapters}

            async def send(message: Outbound) -> list[str]:
                return await by_name[message.platform].send(message)

            def stream(message: Outbound) -> ReplyStream | None:
                return by_name[message.platform].stream(message)

            async def replace(message: Outbound, ids: Sequence[str]) -> list[str]:
                adapter = by_name[message.platform]
                if isinstance(adapter, Retracts):  # else it cannot edit: the new one is sent
                    return await adapter.replace(message, ids)
                return await adapter.send(message)

            async def delete(message: Outbound, ids: Sequence[str]) -> int:
                adapter = by_name[message.platform]
                return await adapter.delete(message, ids) if isinstance(adapter, Retracts) else 0

            def typing(chat: Inbound) -> AbstractAsyncContextManager[None]:
                return by_name[chat.platform].typing(chat)

            def notes() -> list[str]:
                return [note for adapter in by_name.values() for note in adapter.notes()]

            history = HistoryStore(db)
            souls = SoulLocks(db)
            reminder_store = ReminderStore(db)
            reminders = Reminders(reminder_store, config.reminders, clock)
            check_ins = CheckIns(db, reminders, model, config, clock)
            reflector = Reflector(config.heartbeat, registry, model, history, memory, db, souls,
                                  after=check_ins.plan)  # fmt: skip
            stack.push_async_callback(reflector.stop)
            agent = Agent(registry, model, memory, more_tools=reflector.tools)
            groups = config.groups
            ambient = Ambient(groups.ambient, config.model, model, registry)

            async def forget(sessions: list[str]) -> None:
                ambient.drop(sessions)
                await reflector.forget(sessions)
                await reminder_store.forget_sessions(sessions)

            sessions = SessionManager(SessionParts(
                history, agent, send, typing, config.memory.history_token_budget, memory,
                reflector.turn_done, forget,
                RateLimit(per) if (per := config.limits.messages_per_minute) else None,
                stream, ChannelContext(groups.context_messages, groups.context_tokens),
                config.data_dir / MEDIA_FOLDER if config.media.keep else None, config.media,
                cluster.leases, Voicing(config, registry, speech), ambient.replied,
                replace, delete, reminders,
            ))  # fmt: skip
            access = Access(db, config)
            reminder_commands = ReminderCommands(reminders, check_ins, clock)
            web_login = WebAuth(db, config.web)
            commands = Commands(registry=registry, sessions=sessions, memory=memory,
                                access=access, db=db, souls=souls, send=send, notes=notes,
                                reminders=reminder_commands, web_login=web_login)  # fmt: skip
            heard = config.voice.transcription
            transcriber = None
            if heard.base_url is not None:
                transcriber = await stack.enter_async_context(Transcriber(heard))
            hearing = Hearing(heard, transcriber, ledger)
            router = Router(config, default_soul, sessions, send, access, commands, hearing,
                            ambient, places=ChatPlaces(db))  # fmt: skip
            # Kept images age out even after `media.keep` is turned off.
            retention = Retention(config.retention, db, config.data_dir / MEDIA_FOLDER)
            delivery = ReminderDelivery(
                reminder_store, sessions, agent, cluster, router.route, by_name,
                grace_s=config.reminders.grace_s, lease_s=config.sessions.lease_s, clock=clock,
                check_ins=check_ins,
            )  # fmt: skip
            runtime = cls(config, registry, db, ledger, model, memory, sessions, router,
                          reflector, history, retention, cluster, access, souls, web_login,
                          by_name, delivery)  # fmt: skip
            stack.push_async_callback(runtime._each_adapter, lambda adapter: adapter.close())
            runtime._stack = stack.pop_all()
        return runtime

    async def recover(self, own_instance: bool = False) -> int:
        """Answer, once, each message a crash left unanswered within
        `sessions.recover_window_s` (`sessions.recovered`) in a conversation
        this process owns (bot/cluster/ownership.py: its shard's, Telegram's,
        its own terminal's); one another live process owns is left to it,
        counted (`sessions.recover_elsewhere`). Nor one whose turn another
        process is running (its lease: bot/cluster/leases.py). With
        `own_instance` (the caller holds the instance's lock: bot/app/owner.py),
        the leases an earlier run of this instance left are released first
        (`sessions.leases_released`): it is dead. Call once the adapters serve
        (and, on a shared store, the process has joined). Returns how many
        sessions were taken up again."""
        leases = self.cluster.leases
        if own_instance and leases is not None and (released := await leases.release_earlier()):
            log.info("sessions.leases_released", leases=released)
        window = self.config.sessions.recover_window_s
        if not window:
            return 0
        unanswered = await self.history.unanswered(time.time() - window)
        owners = await self.cluster.owners()
        count = elsewhere = 0
        for session, address in unanswered:
            try:
                inbound = Inbound.from_address(address)
                route = self.router.route(inbound)
                mine = owners.mine(inbound)
            except (ValueError, TypeError) as exc:  # an address from an older or broken row
                log.warning("sessions.recover_failed", session=session, error=str(exc))
                continue
            if not mine:
                elsewhere += 1
            elif inbound.platform in self.adapters and await self.sessions.recover(route, inbound):
                count += 1
        if elsewhere:
            log.info("sessions.recover_elsewhere", sessions=elsewhere,
                     reason="another live process owns them")  # fmt: skip
        if count:
            log.info("sessions.recovered", sessions=count)
        return count

    async def start_adapters(self) -> None:
        """Start every adapter; one that fails is logged (`adapter.error`,
        stage start) and left out while the others serve. Raises SoulbotError
        when none starts."""
        for name, adapter in list(self.adapters.items()):
            try:
                await adapter.start(self.router.handle)
            except Exception as exc:
                reason = str(exc) if isinstance(exc, AdapterStartError) else repr(exc)
                log.error("adapter.error", adapter=name, stage="start", error=reason)
                del self.adapters[name]
                await self._each_adapter(lambda a: a.close(), [adapter])
                continue
            log.info("adapter.connected", adapter=name)
        if not self.adapters:
            raise SoulbotError("no adapter could start (the log says why)")

    async def _each_adapter(
        self, step: Callable[[Adapter], Awaitable[None]], adapters: Sequence[Adapter] | None = None
    ) -> None:
        for adapter in list(self.adapters.values()) if adapters is None else adapters:
            try:
                await step(adapter)
            except Exception as exc:
                log.error("adapter.error", adapter=adapter.name, error=str(exc))

    async def stop_adapters(self) -> None:
        """Stop the intake of every adapter (replies still go out)."""
        await self._each_adapter(lambda adapter: adapter.stop())

    async def close(self) -> None:
        """Close adapters, the reflector, the model client and the database, in
        that order (the reverse of `open`). Idempotent."""
        await self._stack.aclose()
