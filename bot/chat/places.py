"""Where a message lives: the binding that catches it (so the soul that answers)
and its memory scope; and, from the same rule, whether a soul's heartbeat can
ever write its SOUL.md.

The rule (bot/chat/router.py's docstring tells it whole): a DM is always the
person's own scope, but the operator's terminal may be bound to `shared`; a
private thread is its own; elsewhere the binding's `memory`, else
`memory.scope`: `shared` is the soul's own wiki, `per-member` the place of the
server's (a Discord guild's, a Telegram group's) members, where each speaker's
memory is their own `member` scope there (`member_route`), any other the
chat's scope.
The heartbeat (bot/chat/reflect.py) writes SOUL.md only from a conversation in
the shared scope; every other conversation's reflection goes to the `self`
page of its own scope's wiki.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from bot.config.schema import Binding, Config, MemoryScope
from bot.errors import InvalidKeyError
from bot.types import SHARED, Inbound, Route, Scope

CONSOLE = "console"
PER_MEMBER = "per-member"
# The ids of a message no binding names (bindings name ids by number).
_UNNAMED = "unnamed"


def binding_for(bindings: Sequence[Binding], inbound: Inbound) -> Binding | None:
    """The first binding that matches `inbound`, or None."""
    return next((b for b in bindings if _matches(b, inbound)), None)


def _matches(binding: Binding, inbound: Inbound) -> bool:
    if binding.platform != inbound.platform:
        return False
    if binding.guild is not None and str(binding.guild) != inbound.guild_id:
        return False
    if binding.channel is not None and str(binding.channel) != inbound.chat_id:
        return False
    return binding.chat is None or str(binding.chat) == inbound.chat_id


def memory_mode(config: Config, binding: Binding | None) -> MemoryScope:
    """The memory setting where `binding` matches: its own, else `memory.scope`."""
    return (binding.memory if binding and binding.memory else None) or config.memory.scope


def memory_scope(inbound: Inbound, mode: str) -> Scope:
    """The memory scope of `inbound` where the memory setting is `mode` (see the
    module docstring)."""
    place = inbound.thread_id if inbound.private_thread and inbound.thread_id else None
    # The console is the operator's own terminal: theirs to share with the soul.
    operator = inbound.platform == CONSOLE and mode == SHARED
    if inbound.is_dm and not operator:
        return Scope("user", inbound.platform, inbound.user_id)
    if place is not None:
        return Scope("chat", inbound.platform, place)
    if mode == SHARED:
        return Scope("shared")
    server = inbound.guild_id if inbound.platform == "discord" else inbound.chat_id
    if mode == PER_MEMBER and server is not None:
        return Scope("members", inbound.platform, server)
    return Scope("chat", inbound.platform, inbound.chat_id)


def member_route(route: Route, user_id: str | None) -> Route | None:
    """The route of a speaker's memory: in a per-member place (`members:`), the
    route with `user_id`'s `member` scope of that server, or None when who
    spoke is not known (several people, an id that breaks the key rule): then
    no private memory is read or written. Anywhere else, `route` itself."""
    place = Scope.parse(route.scope)
    if not place.per_member:
        return route
    if user_id is None:
        return None
    try:
        return replace(route, scope=str(place.member(user_id)))
    except InvalidKeyError:
        return None


def _sample(platform: str, binding: Binding | None) -> tuple[Inbound, str]:
    """A message of the place `binding` names (or, without one, of a group or the
    terminal no binding names), and how to name that place."""
    chat = binding.chat or binding.channel if binding else None
    # Telegram gives a private chat the person's id (a positive number), a group a negative one.
    private = platform == CONSOLE or (platform == "telegram" and chat is not None and chat > 0)
    inbound = Inbound(
        platform=platform,
        chat_id=_UNNAMED if chat is None else str(chat),
        user_id=_UNNAMED,
        user_name=_UNNAMED,
        text="",
        is_dm=private,
        guild_id=str(binding.guild) if binding and binding.guild is not None else _UNNAMED,
    )
    if platform == CONSOLE:
        where = "the terminal"
    elif binding is None:
        where = f"{platform} groups and DMs"
    elif private:
        where = f"{platform} private chat {chat}"
    else:
        where = f"{platform} {'chat' if binding.chat else 'channel' if chat else 'groups'}"
        where += f" {chat}" if chat else ""
    return inbound, where


def heartbeat_blocked(
    config: Config, soul: str, default_soul: str, platforms: Collection[str]
) -> str | None:
    """Why the heartbeat of `soul` can never write its SOUL.md when the
    adapters of `platforms` serve and `default_soul` answers where no binding
    does; None when some place it answers in is of the shared scope. Does not
    look at the soul itself (a soul without regions has no heartbeat at all)."""
    places: list[str] = []
    candidates: list[tuple[str, Binding | None]] = [
        (b.platform, b) for b in config.bindings if b.soul == soul
    ]
    candidates += [(platform, None) for platform in platforms]
    for platform, binding in candidates:
        if platform not in platforms:
            continue
        inbound, where = _sample(platform, binding)
        caught = binding_for(config.bindings, inbound)
        if caught is not binding or (caught is None and default_soul != soul):
            continue  # another binding takes that place, or another soul answers there
        mode = memory_mode(config, binding)
        if memory_scope(inbound, mode).is_shared:
            return None
        after = ", where it does not reflect" if mode == PER_MEMBER else ""
        places.append(f"{where} (memory {mode}{after})")
    if not places:
        return (
            f"{soul}: its heartbeat never writes SOUL.md: it answers nowhere (it is not the "
            "default soul, and no binding on a platform that starts names it)"
        )
    return (
        f"{soul}: its heartbeat never writes SOUL.md, which it does only from a group, channel "
        f"or terminal conversation whose memory is shared; it answers in {', '.join(places)}, "
        "so each reflection goes to its conversation's own `self` page: set memory.scope: "
        "shared, or memory: shared on a binding of it, for it to write itself"
    )
