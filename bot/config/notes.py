"""What the memory settings mean where people talk, as `soulbot check` says it.

A DM is always the person's own scope and a Discord private thread its own;
`shared`, `per-user` and `per-member` therefore mean less than their names in
some places.
"""

from __future__ import annotations

from bot.config.schema import Config

PER_USER = (
    "memory per-user: each person's own scope in DMs; in groups and channels it means "
    "the chat's own scope (a person's scope is read only in their DMs)"
)
SHARED = (
    "memory shared: groups and channels share the soul's wiki; DMs and private threads "
    "keep their own scope"
)
PER_MEMBER = (
    "memory per-member: in a server or group, each member's own memory of it (what they "
    "said in any of its channels, read only in their own turns there); DMs and private "
    "threads keep their own scope"
)
CONSOLE_SHARED = (
    "memory shared: the terminal shares the soul's wiki (what you say there reaches "
    "every conversation of the soul)"
)


def scope_notes(config: Config) -> list[str]:
    """One line per memory setting whose meaning depends on the place."""
    notes = []
    meanings = {"per-user": PER_USER, "shared": SHARED, "per-member": PER_MEMBER}
    if config.memory.scope in meanings:
        notes.append(f"memory.scope: {meanings[config.memory.scope]}")
    for i, binding in enumerate(config.bindings):
        meaning = meanings.get(binding.memory or "")
        if binding.memory == "shared" and binding.platform == "console":
            meaning = CONSOLE_SHARED
        if meaning:
            notes.append(f"bindings[{i}] ({binding.platform}): {meaning}")
    return notes
