"""Whether a soul's heartbeat can ever write its SOUL.md (bot/chat/places.py): only
from a conversation of the shared scope, decided by the router's own rule."""

from __future__ import annotations

import pytest

from bot.chat.places import heartbeat_blocked, memory_scope
from bot.config.load import parse_config
from bot.types import Inbound

ON = ("telegram", "discord", "console")
NEVER = "lark: its heartbeat never writes SOUL.md"
NOWHERE = f"{NEVER}: it answers nowhere"


def blocked(yaml: str, default: str = "lark", platforms: tuple[str, ...] = ON) -> str | None:
    return heartbeat_blocked(parse_config(yaml, "test.yaml", {}), "lark", default, platforms)


@pytest.mark.parametrize(
    ("yaml", "default", "platforms"),
    [
        ("memory: {scope: shared}", "lark", ("telegram",)),  # its groups
        ("memory: {scope: shared}", "lark", ("console",)),  # the operator's terminal
        ("bindings: [{platform: telegram, chat: -1001, soul: lark, memory: shared}]", "wren",
         ON),  # a group bound to it
        ("bindings: [{platform: discord, guild: 7, soul: lark, memory: shared}]", "wren", ON),
    ],
    ids=["shared-groups", "shared-terminal", "bound-group", "bound-guild"],
)  # fmt: skip
def test_a_place_of_the_shared_scope_lets_it_write(
    yaml: str, default: str, platforms: tuple[str, ...]
) -> None:
    assert blocked(yaml, default, platforms) is None


def test_the_chats_own_scope_everywhere_says_where_it_answers() -> None:
    note = blocked("memory: {scope: auto}", platforms=("telegram", "console"))
    assert note == (
        f"{NEVER}, which it does only from a group, channel or terminal conversation whose "
        "memory is shared; it answers in telegram groups and DMs (memory auto), the terminal "
        "(memory auto), so each reflection goes to its conversation's own `self` page: set "
        "memory.scope: shared, or memory: shared on a binding of it, for it to write itself"
    )


def test_a_telegram_private_chat_is_a_dm_even_when_bound_shared() -> None:
    yaml = "bindings: [{platform: telegram, chat: 4242, soul: lark, memory: shared}]"
    note = blocked(yaml, default="wren")
    assert note is not None and "telegram private chat 4242 (memory shared)" in note


@pytest.mark.parametrize(
    ("yaml", "platforms"),
    [
        ("memory: {scope: shared}", ON),  # not the default, no binding
        ("bindings: [{platform: discord, soul: lark, memory: shared}]", ("telegram",)),  # off
        ("bindings: [{platform: telegram, soul: wren}, "
         "{platform: telegram, chat: -5, soul: lark, memory: shared}]", ON),  # taken first
    ],
    ids=["unbound", "platform-off", "shadowed"],
)  # fmt: skip
def test_a_soul_that_answers_nowhere_is_said_so(yaml: str, platforms: tuple[str, ...]) -> None:
    note = blocked(yaml, default="wren", platforms=platforms)
    assert note is not None and note.startswith(NOWHERE)


def test_memory_scope_is_the_routers_rule() -> None:
    def said(platform: str, is_dm: bool, mode: str, **more: object) -> str:
        inbound = Inbound(platform, "9", "3", "Ann", "hi", is_dm, **more)  # type: ignore[arg-type]
        return str(memory_scope(inbound, mode))

    assert said("telegram", True, "shared") == "user:telegram:3"
    assert said("console", True, "shared") == "shared"
    assert said("telegram", False, "shared") == "shared"
    assert said("telegram", False, "per-user") == "chat:telegram:9"
    assert said("discord", False, "shared", thread_id="8", private_thread=True) == (
        "chat:discord:8"
    )


def test_a_per_member_server_is_named_as_a_place_with_no_reflection() -> None:
    yaml = "bindings: [{platform: discord, guild: 7, soul: lark, memory: per-member}]"
    note = blocked(yaml, default="wren")
    assert note is not None
    assert "discord groups (memory per-member, where it does not reflect)" in note
