"""Session keys, bindings and memory scopes (docs/memory.md, docs/commands.md)."""

from __future__ import annotations

import pytest

from bot.chat.router import Router, session_key
from bot.config.load import parse_config
from bot.types import Inbound


def inbound(platform: str, **fields: object) -> Inbound:
    base: dict[str, object] = {
        "platform": platform, "chat_id": "100", "user_id": "7", "user_name": "Ann",
        "text": "hi", "is_dm": False,
    }  # fmt: skip
    return Inbound(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "key"),
    [
        (inbound("discord"), "discord:100"),
        (inbound("discord", thread_id="555"), "discord:555"),
        (inbound("discord", is_dm=True), "discord:dm:7"),
        (inbound("telegram"), "telegram:100"),
        (inbound("telegram", thread_id="3"), "telegram:100:3"),
        (inbound("telegram", chat_id="7", is_dm=True), "telegram:7"),
        (inbound("console", chat_id="ann", is_dm=True), "console:ann"),
    ],
)
def test_session_keys(message: Inbound, key: str) -> None:
    assert session_key(message) == key


def router(yaml: str) -> Router:
    config = parse_config(yaml, "t", {})
    return Router(config, "wren", None, None, None, None)  # type: ignore[arg-type]


def test_bindings_first_match_wins_and_default_soul_otherwise() -> None:
    r = router(
        "bindings:\n"
        "  - {platform: discord, guild: 1, channel: 100, soul: quiet}\n"
        "  - {platform: discord, guild: 1, soul: loud}\n"
        "  - {platform: telegram, chat: 100, soul: tg}\n"
    )
    assert r.route(inbound("discord", guild_id="1")).soul == "quiet"
    assert r.route(inbound("discord", guild_id="1", chat_id="200")).soul == "loud"
    assert r.route(inbound("discord", guild_id="2")).soul == "wren"
    assert r.route(inbound("telegram")).soul == "tg"
    assert r.route(inbound("telegram", chat_id="101")).soul == "wren"


@pytest.mark.parametrize(
    ("mode", "is_dm", "scope", "payer"),
    [
        ("auto", True, "user:telegram:7", "telegram:7"),
        ("auto", False, "chat:telegram:100", "telegram:chat:100"),
        # A DM keeps the person's own scope whatever the config says.
        ("shared", True, "user:telegram:7", "telegram:7"),
        ("per-chat", True, "user:telegram:7", "telegram:7"),
        ("shared", False, "shared", "telegram:chat:100"),
        # In a group, per-user means the chat: a person's scope is read only in their DMs.
        ("per-user", False, "chat:telegram:100", "telegram:chat:100"),
        ("per-chat", False, "chat:telegram:100", "telegram:chat:100"),
    ],
)
def test_memory_scopes_and_who_pays(mode: str, is_dm: bool, scope: str, payer: str) -> None:
    r = router(f"memory: {{scope: {mode}}}")
    route = r.route(inbound("telegram", is_dm=is_dm))
    assert route.scope == scope
    assert route.user == payer


def test_a_binding_memory_mode_wins_in_groups_and_never_opens_a_dm_scope() -> None:
    r = router(
        "memory: {scope: per-chat}\nbindings: [{platform: telegram, soul: w, memory: shared}]"
    )
    assert r.route(inbound("telegram")).scope == "shared"
    r = router("bindings: [{platform: telegram, soul: w, memory: per-user}]")
    assert r.route(inbound("telegram")).scope == "chat:telegram:100"
    assert r.route(inbound("telegram", is_dm=True)).scope == "user:telegram:7"


def test_only_the_operators_console_may_share_a_dm() -> None:
    r = router("bindings: [{platform: console, soul: w, memory: shared}]")
    assert r.route(inbound("console", chat_id="root", user_id="root", is_dm=True)).scope == (
        "shared"
    )
    r = router("bindings: [{platform: telegram, soul: w, memory: shared}]")
    assert r.route(inbound("telegram", is_dm=True)).scope == "user:telegram:7"


def test_a_group_route_is_the_same_whoever_speaks() -> None:
    r = router("bindings: [{platform: telegram, soul: w, memory: per-user}]")
    routes = {r.route(inbound("telegram", user_id=u, user_name=u)) for u in ("7", "8", "9")}
    assert len(routes) == 1


@pytest.mark.parametrize("mode", ["auto", "shared"])
@pytest.mark.parametrize(
    ("fields", "session", "scope"),
    [
        ({}, "discord:100", None),
        ({"thread_id": "555"}, "discord:555", None),  # a public thread: its parent's scope
        ({"thread_id": "555", "private_thread": True}, "discord:555", "chat:discord:555"),
        ({"is_dm": True}, "discord:dm:7", "user:discord:7"),
    ],
)
def test_discord_places(mode: str, fields: dict[str, object], session: str,
                        scope: str | None) -> None:  # fmt: skip
    route = router(f"memory: {{scope: {mode}}}").route(inbound("discord", **fields))
    public = "shared" if mode == "shared" else "chat:discord:100"
    assert (route.session, route.scope) == (session, scope or public)
