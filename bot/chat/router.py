"""Inbound message -> gate -> route (soul, memory scope, session) -> session or command.

The gate (docs/memory.md): a private chat passes the DM policy (bot/chat/access.py); a
group message is answered when it is addressed to the bot (a mention or a
reply to the bot) or when the rule is `always` (`adapters.telegram.groups`,
`adapters.discord.guilds`, or a binding's `respond`); where it is `ambient`,
every message joins the channel's window and an unaddressed one is answered
when ambient mode's gate says so (bot/chat/ambient.py), as an unprompted
reply. A command (a message
starting with "/" and naming one of ours) skips the mention rule; an unknown
"/word" in a group is treated as a plain message. The adapters drop commands
addressed to another bot. A group message that is not answered is kept as
context for the next turn of its session (`SessionManager.overhear`; a memory
trace too with `groups.remember_unaddressed`, in a chat's own scope, or its
speaker's member scope, only).

Another bot's message (`Inbound.from_bot`; the bot's own never come) is
dropped unread where `respond_to_bots` is off, and in DMs; where it is on, it
is gated as a person's (never as a command, never answered by ambient mode),
then by its channel's bot-to-bot chain and cap (bot/chat/bots.py), and shown
under its name marked as a bot's. A router failure is never apologised for to
a bot.

A reply carries the quoted message (its sender and text, cut to
QUOTE_CHARS) at the head of its history row, marked as quoted; a reply to a
message the platform does not resolve is looked up among the bot's own sent
messages, so a reply to the bot is known after a restart too. The images of
an answered message are screened here (bot/chat/media.py: how many, their
announced size), and downloaded by its session when its turn starts; what is
refused here is said in one line, and the message goes on with what is left.
A voice note of an answered message is heard here (bot/chat/voice.py): its
transcript becomes the person's words (`Inbound.spoken`); a note not heard is
said in one line and kept as its placeholder, answered with the next message
when nothing else came with it. An unaddressed group voice note is context as
its transcript with `voice.transcription.in_groups: transcribe`, else as its
placeholder.

Session keys: `discord:<channel_id>` (a thread is its own channel),
`discord:dm:<user_id>`, `telegram:<chat_id>` (+ `:<topic_id>` in forum groups),
`console:<name>`. The soul is the first matching binding's, else `default_soul`.
The memory scope: a DM is always the person's own (`user:<platform>:<id>`;
only the operator's console may be bound to `shared`), a Discord private
thread its own (`chat:discord:<thread>`); elsewhere the
binding's `memory`, else `memory.scope`: `shared` is the soul's wiki, and
`per-chat`, `per-user` and `auto` all mean the chat's own scope (a person's
scope is read only in their DMs), and `per-member` the server's (the Discord
guild's, the Telegram group's) per-member place `members:<platform>:<server>`,
where each speaker's words go to, and their turns read, their own
`member:<platform>:<server>:<user>` scope (bot/chat/sessions.py). A public
thread or forum topic is a session of its own in its parent's scope. A turn
in a group is charged to the chat (`<platform>:chat:<id>` in the ledger and
the per-user budget).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from dataclasses import replace

import structlog

from bot import prompts
from bot.chat.access import Access
from bot.chat.ambient import Ambient
from bot.chat.bots import Bots
from bot.chat.chat_places import ChatPlaces
from bot.chat.commands import Commands
from bot.chat.manager import SessionManager
from bot.chat.media import Pictured, placeholder, refusal, screen
from bot.chat.places import binding_for, memory_mode, memory_scope
from bot.chat.sessions import Send, internal_cause, reply_to, send_safely
from bot.chat.voice import Hearing
from bot.chat.voice import placeholder as voice_placeholder
from bot.config.schema import Binding, Config, GroupRule
from bot.errors import InvalidKeyError, StoreUnavailable
from bot.text import valid
from bot.types import Inbound, Quote, Route, SessionKey

log = structlog.get_logger(__name__)

# A longer message is cut (the platforms' own caps are 4,096 characters on
# Telegram and 4,000 on Discord): one paste must not eat a day's budget.
MAX_MESSAGE_CHARS = 8000
# A quoted message is cut here: enough to know what is meant.
QUOTE_CHARS = 500
# Every Cc character (C0, DEL, C1) but tab and newline, and the bidi embeddings,
# overrides and isolates, which reorder what follows them. Joiners (U+200D) and
# variation selectors stay: emoji are built of them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str) -> str:
    """The text with bad code points replaced (U+FFFD), without control
    characters (tabs and newlines stay) and bidi controls, stripped, and cut at
    MAX_MESSAGE_CHARS with a note saying so."""
    text = _CONTROL.sub("", valid(text)).strip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + prompts.MESSAGE_CUT.format(chars=len(text))
    return text


def clean_name(name: str) -> str:
    """A display name as `clean_text` cleans a text, on one line: its line
    breaks and other runs of white space are one space."""
    return " ".join(_CONTROL.sub("", valid(name)).split())


def quote_line(quote: Quote) -> str:
    """The quoted message as the history row shows it, cleaned and cut."""
    text = " ".join(_CONTROL.sub("", valid(quote.text)).split())
    if len(text) > QUOTE_CHARS:
        text = text[:QUOTE_CHARS] + "…"
    if quote.from_bot:
        return prompts.QUOTED_BOT.format(text=text)
    return prompts.QUOTED.format(name=clean_name(quote.user_name), text=text)


def _kinds(inbound: Inbound) -> tuple[str, ...]:
    """The kinds of the images a message carries ("photo", "image")."""
    return tuple(m.kind for m in inbound.images)


def session_key(inbound: Inbound) -> str:
    """The session key of a message (see the module docstring). Raises
    InvalidKeyError for an id that breaks the key rule."""
    if inbound.platform == "discord":
        if inbound.is_dm:
            return str(SessionKey("discord", inbound.user_id, dm=True))
        return str(SessionKey("discord", inbound.thread_id or inbound.chat_id))
    return str(SessionKey(inbound.platform, inbound.chat_id, inbound.thread_id))


class Router:
    """Gates messages, routes them to sessions and hands commands over."""

    def __init__(
        self,
        config: Config,
        default_soul: str,
        sessions: SessionManager,
        send: Send,
        access: Access,
        commands: Commands,
        hearing: Hearing | None = None,
        ambient: Ambient | None = None,
        bots: Bots | None = None,
        places: ChatPlaces | None = None,
    ) -> None:
        self.places = places  # which `chat:` scopes are groups' (the web console reads it)
        self._ambient = ambient
        self._bots = bots or Bots(config.groups.bots)
        self._queues: dict[str, deque[Inbound]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._config = config
        self._default_soul = default_soul
        self._sessions = sessions
        self._send = send
        self._access = access
        self._commands = commands
        self._hearing = hearing or Hearing(config.voice.transcription, None)

    def _binding(self, inbound: Inbound) -> Binding | None:
        return binding_for(self._config.bindings, inbound)

    def route(self, inbound: Inbound) -> Route:
        """Where `inbound` lives (see the module docstring). A private place
        keeps its own scope whatever the config says: a DM is always the
        person's `user:` scope (but the operator's console may be bound to
        `shared`), a private thread its own `chat:` scope. In a
        public place, `per-user` means the chat's scope (a person's scope is
        read only in their DMs) and the turn is charged to the chat, not to
        whoever spoke last."""
        binding = self._binding(inbound)
        soul = binding.soul if binding else self._default_soul
        scope = memory_scope(inbound, memory_mode(self._config, binding))
        place = inbound.thread_id if inbound.private_thread and inbound.thread_id else None
        payer = inbound.user_id if inbound.is_dm else f"chat:{place or inbound.chat_id}"
        return Route(
            soul=soul,
            scope=str(scope),
            session=session_key(inbound),
            user=f"{inbound.platform}:{payer}",
            is_dm=inbound.is_dm,
        )

    def group_rule(self, inbound: Inbound) -> GroupRule:
        """When a group message is answered: `mention`, `ambient` or `always`."""
        binding = self._binding(inbound)
        if binding is not None and binding.respond is not None:
            return binding.respond
        if inbound.platform == "discord":
            return self._config.adapters.discord.guilds
        if inbound.platform == "telegram":
            return self._config.adapters.telegram.groups
        return "always"

    def respond_to_bots(self, inbound: Inbound) -> bool:
        """Whether other bots' messages may be answered where `inbound` came."""
        binding = self._binding(inbound)
        if binding is not None and binding.respond_to_bots is not None:
            return binding.respond_to_bots
        return self._config.groups.respond_to_bots

    async def handle(self, inbound: Inbound) -> None:
        """Take one message and return at once: messages are handled in a task
        per chat, so chats go on concurrently and each chat in order, and no
        platform's update loop waits on a turn or a command. Never raises."""
        try:
            key = session_key(inbound)
        except InvalidKeyError:
            key = f"{inbound.platform}:?"  # refused by `route`, with one line, in turn
        queue = self._queues.setdefault(key, deque())
        queue.append(inbound)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._work(key, queue), name=f"chat:{key}")

    async def _work(self, key: str, queue: deque[Inbound]) -> None:
        try:
            while queue:
                await self._handle_one(queue.popleft())
        finally:
            del self._workers[key]
            if not queue:
                self._queues.pop(key, None)

    @property
    def commands(self) -> Commands:
        return self._commands

    async def wait(self, seconds: float) -> int:
        """Wait up to `seconds` for the messages taken so far to be handled
        (stored, or answered); returns how many chats are still at it."""
        if self._workers:
            await asyncio.wait(list(self._workers.values()), timeout=seconds)
        return len(self._workers)

    async def _note_place(self, inbound: Inbound) -> None:
        """Note whether a group message's `chat:` scope is a group's or a private
        thread's (bot/chat/chat_places.py)."""
        if self.places is None:
            return
        try:
            scope = self.route(inbound).scope
        except InvalidKeyError:
            return  # refused by `route`, with one line, in turn
        await self.places.note(scope, inbound.private_thread)

    async def _handle_one(self, inbound: Inbound) -> None:
        """Gate and route one message; never raises (a failure is logged, and a
        message addressed to the bot is answered with one honest line)."""
        text = clean_text(inbound.text)
        name = clean_name(inbound.user_name)
        if inbound.from_bot:
            name = prompts.BOT_AUTHOR.format(name=name)
        inbound = replace(inbound, text=text, user_name=name)
        if not text and not inbound.media and not inbound.images and not inbound.audio:
            return
        try:
            if inbound.from_bot and not self._bots_heard(inbound):
                return
            inbound = await self._resolve_reply(inbound)
            # In a group, "/word" that is none of ours is for another bot (or a typo),
            # unless it is addressed to us. A bot's message is never a command.
            command = (
                not inbound.from_bot
                and text.startswith("/")
                and (inbound.is_dm or inbound.mentions_bot or self._commands.knows(text))
            )
            unprompted = False
            if inbound.is_dm:
                admission = await self._access.admit(inbound)
                if not admission.admitted:
                    await send_safely(self._send, reply_to(inbound, admission.reply))
                    return
            else:
                await self._note_place(inbound)
                rule = self.group_rule(inbound)
                if not inbound.from_bot:
                    self._bots.human(session_key(inbound))
                ambient = self._ambient if rule == "ambient" and not command else None
                if ambient is not None:
                    ambient.hear(session_key(inbound), inbound)
                addressed = command or inbound.mentions_bot or inbound.reply_to_bot
                addressed = addressed or rule == "always"
                if inbound.from_bot:
                    route = self.route(inbound)
                    if not self._bots.answers(route.session, route.soul, inbound.ts, addressed):
                        await self._overhear(inbound)
                        return
                elif not addressed:
                    if not (ambient and text and await ambient.speaks(self.route(inbound))):
                        await self._overhear(inbound)
                        return
                    unprompted = True
            if not text and not inbound.images and not inbound.audio:
                # media that is not read, past the gate like any message
                await send_safely(self._send, reply_to(inbound, prompts.TEXT_ONLY))
                return
            route = self.route(inbound)
            if command:
                if await self._sessions.first_delivery(route.session, inbound.message_id):
                    reply = await self._commands.run(inbound, route, text)
                    # an empty reply for a take-back: its line comes when it is done
                    if reply.text or reply.image or reply.attachment:
                        await send_safely(self._send, reply)
                return
            prefix = "" if inbound.is_dm else f"{inbound.user_name}: "
            if inbound.quote is not None:
                prefix += quote_line(inbound.quote) + "\n"
            unheard = ""
            if inbound.audio:
                inbound, unheard = await self._hear(inbound, route)
                text = inbound.text
                if not text and not inbound.images:  # nothing to answer: the line said why
                    await self._sessions.deliver(route, inbound, prefix + unheard, start=False)
                    return
            pictured = await self._pictures(inbound)
            if pictured is not None and not pictured.media and not text:
                return  # nothing left to answer: the refusal said why
            if pictured is not None:
                pictured = replace(pictured, prefix=prefix)
                rendered = pictured.row()
            else:
                rendered = prefix + text
            if unheard:
                rendered += f"\n{unheard}"
            await self._sessions.deliver(route, inbound, rendered, pictured, unprompted=unprompted)
        except Exception as exc:  # the dispatch boundary: one line, the loop lives on
            log.exception("router.failed", platform=inbound.platform, error=str(exc))
            # never to a bot: a bot that answers it would loop with us outside the chain's cap
            addressed = inbound.is_dm or inbound.mentions_bot or inbound.reply_to_bot
            if addressed and not inbound.from_bot:
                cause = (
                    str(exc)
                    if isinstance(exc, StoreUnavailable)
                    else internal_cause(exc, "the router")
                )
                await send_safely(self._send, reply_to(inbound, prompts.APOLOGY, cause))

    def _bots_heard(self, inbound: Inbound) -> bool:
        """Whether another bot's message goes on past the door (bot/chat/bots.py):
        not in a DM, nor where `respond_to_bots` is off (it is dropped, logged)."""
        key = session_key(inbound)
        soul = self.route(inbound).soul
        if inbound.is_dm:
            return self._bots.ignored(key, soul, "a DM")
        if not self.respond_to_bots(inbound):
            return self._bots.ignored(key, soul, "respond_to_bots is off")
        return True

    async def _resolve_reply(self, inbound: Inbound) -> Inbound:
        """`inbound`, with the quote of the bot's own message it replies to when
        the platform named the message only (it was not in its cache, or the
        bot has restarted since): the bot's sent ids say whose it was."""
        if inbound.reply_to_id is None or inbound.quote is not None:
            return inbound
        sent = await self._sessions.sent_text(session_key(inbound), inbound.reply_to_id)
        if sent is None:
            return inbound
        return replace(inbound, reply_to_bot=True, quote=Quote("", sent, from_bot=True))

    async def _hear(self, inbound: Inbound, route: Route) -> tuple[Inbound, str]:
        """The message with its voice notes heard: its text their transcripts
        (its caption after them) and `spoken` when one was heard; and the
        placeholders of those not heard, for its history row. What was not
        heard is said in one line."""
        if not self._hearing.configured:
            await send_safely(self._send, reply_to(inbound, prompts.VOICE_NOT_CONFIGURED))
            return inbound, voice_placeholder(inbound.audio)
        heard = await self._hearing.hear(inbound, route)
        line = heard.line()
        if line is not None:
            await send_safely(self._send, reply_to(inbound, line))
        if not heard.words:
            return replace(inbound, audio=heard.audio), heard.row
        text = clean_text(" ".join(part for part in (heard.words, inbound.text) if part))
        return replace(inbound, text=text, spoken=True, audio=heard.audio), heard.row

    async def _overhear(self, inbound: Inbound) -> None:
        """Keep an unaddressed group message as context (see the module docstring)."""
        route = self.route(inbound)
        groups = self._config.groups
        body = inbound.text
        if inbound.images:  # never downloaded for a line the bot does not answer
            body = placeholder(_kinds(inbound), True, inbound.text)
        elif inbound.audio:
            body = await self._overheard_voice(inbound, route)
        elif not body:
            return
        remember = groups.remember_unaddressed and route.scope.startswith(("chat:", "members:"))
        self._sessions.overhear(route, inbound, body, remember)

    async def _overheard_voice(self, inbound: Inbound, route: Route) -> str:
        """What a group's unaddressed voice note gives the next turn: its
        transcript (`in_groups: transcribe`; charged to the chat; a note not
        heard is its placeholder, and nobody is told), else its placeholder."""
        parts = [inbound.text] if inbound.text else []
        if not self._hearing.in_groups:
            return " ".join([voice_placeholder(inbound.audio), *parts])
        heard = await self._hearing.hear(inbound, route)
        return clean_text(" ".join(p for p in (heard.words, heard.row, *parts) if p))

    async def _pictures(self, inbound: Inbound) -> Pictured | None:
        """The images of an answered message, screened (not downloaded), with
        one line to the person for what was refused; None when it carries none."""
        if not inbound.images:
            return None
        media, refused = screen(inbound.images, self._config.media)
        if refused:
            await send_safely(self._send, reply_to(inbound, refusal(refused)))
        return Pictured(media, _kinds(inbound), inbound.text, inbound.user_name)
