"""Member memory (`memory: per-member`, docs/memory.md#member-memory): the keys, the
routing, and a runtime's turns: a member's words go to their member scope of the
server, and are recalled in their own turns in any channel of it, never in anyone
else's, in a DM or in another server; a turn answering several people reads no
member's; /forget and /memory on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.places import member_route
from bot.chat.router import Router
from bot.config.load import parse_config
from bot.errors import InvalidKeyError
from bot.types import Inbound, Route, Scope
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, make_config, running, user_texts

GUILD, OTHER_GUILD, GROUP = "900", "901", "-100"
BINDINGS = (
    "bindings:\n"
    f"  - {{platform: discord, guild: {GUILD}, soul: lark, memory: per-member}}\n"
    f"  - {{platform: telegram, chat: {GROUP}, soul: lark, memory: per-member}}\n"
    "limits: {messages_per_minute: null}\n"
    "adapters: {telegram: {dm_policy: open}, discord: {dm_policy: open}}\n"
)
ANN, BOB = "11", "12"


def message(platform: str = "discord", **fields: Any) -> Inbound:
    base: dict[str, Any] = {
        "platform": platform, "chat_id": "700", "user_id": ANN, "user_name": "Ann",
        "text": "hi", "is_dm": False, "guild_id": GUILD if platform == "discord" else None,
    }  # fmt: skip
    return Inbound(**{**base, **fields})


# -- the keys ---------------------------------------------------------------------------


def test_member_scopes_and_places_parse_print_and_have_their_folders() -> None:
    member = Scope.parse("member:discord:900:11")
    assert (member.kind, member.platform, member.server, member.id) == (
        "member", "discord", "900", "11",
    )  # fmt: skip
    assert str(member) == "member:discord:900:11"
    assert member.folder(Path("/m")) == Path("/m/member/discord/900/11")
    place = Scope.parse("members:discord:900")
    assert place.per_member and str(place) == "members:discord:900"
    assert place.member("11") == member
    with pytest.raises(InvalidKeyError):
        place.folder(Path("/m"))  # a place has no wiki of its own
    with pytest.raises(InvalidKeyError):
        member.member("12")  # only a place has members


@pytest.mark.parametrize(
    "text",
    ["member:discord:900", "member:discord:9/0:11", "member:discord::11", "members:discord:9:1",
     "member:discord:900:..", "member:discord:900:11:12"],
)  # fmt: skip
def test_a_member_key_that_breaks_the_rule_is_refused(text: str) -> None:
    with pytest.raises(InvalidKeyError):
        Scope.parse(text)


# -- the routing -------------------------------------------------------------------------


def router(yaml: str = BINDINGS) -> Router:
    return Router(parse_config(yaml, "t", {}), "lark", None, None, None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "session", "scope"),
    [
        ({}, "discord:700", "members:discord:900"),
        ({"chat_id": "701"}, "discord:701", "members:discord:900"),  # any channel of it
        ({"thread_id": "710"}, "discord:710", "members:discord:900"),  # a public thread
        ({"thread_id": "720", "private_thread": True}, "discord:720", "chat:discord:720"),
        ({"is_dm": True, "guild_id": None}, "discord:dm:11", "user:discord:11"),
        ({"guild_id": OTHER_GUILD}, "discord:700", "chat:discord:700"),  # not bound
    ],
    ids=["channel", "another-channel", "public-thread", "private-thread", "dm", "other-server"],
)
def test_discord_places_of_a_per_member_server(fields: dict[str, Any], session: str,
                                               scope: str) -> None:  # fmt: skip
    route = router().route(message(**fields))
    assert (route.session, route.scope) == (session, scope)


@pytest.mark.parametrize(
    ("fields", "session", "scope"),
    [
        ({"chat_id": GROUP}, "telegram:-100", "members:telegram:-100"),
        ({"chat_id": GROUP, "thread_id": "3"}, "telegram:-100:3", "members:telegram:-100"),
        ({"chat_id": ANN, "is_dm": True}, "telegram:11", "user:telegram:11"),
        ({"chat_id": "-101"}, "telegram:-101", "chat:telegram:-101"),
    ],
    ids=["group", "topic", "dm", "other-group"],
)
def test_telegram_places_of_a_per_member_group(fields: dict[str, Any], session: str,
                                               scope: str) -> None:  # fmt: skip
    route = router().route(message("telegram", **fields))
    assert (route.session, route.scope) == (session, scope)


def test_a_place_is_the_same_whoever_speaks_and_each_speaker_has_their_own_scope() -> None:
    r = router()
    routes = {r.route(message(user_id=u)) for u in (ANN, BOB)}
    [place] = routes  # one session, one history binding: the channel's
    assert member_route(place, ANN) == Route("lark", "member:discord:900:11", "discord:700",
                                             "discord:chat:700", False)  # fmt: skip
    assert member_route(place, BOB).scope == "member:discord:900:12"  # type: ignore[union-attr]
    assert member_route(place, None) is None  # who spoke is not known: no member memory
    assert member_route(place, "1/2") is None  # an id that breaks the key rule
    chat = r.route(message(guild_id=OTHER_GUILD))
    assert member_route(chat, ANN) is chat  # elsewhere a route is its own


def test_per_member_is_a_memory_setting_everywhere_and_check_explains_it() -> None:
    from bot.config.notes import scope_notes

    config = parse_config("memory: {scope: per-member}\n" + BINDINGS, "t", {})
    notes = scope_notes(config)
    assert len(notes) == 3 and all("each member's own memory" in n for n in notes)
    assert router("memory: {scope: per-member}").route(message()).scope == "members:discord:900"


# -- a runtime's turns ---------------------------------------------------------------------


def said(request: dict[str, Any]) -> str:
    return json.dumps(request, ensure_ascii=False)


async def ask(runtime: Runtime, platform: RecordingPlatform, inbound: Inbound) -> None:
    """Deliver `inbound` and wait for its answer."""
    before = len(platform.sent)
    await platform.hear(inbound)
    await platform.replies(before + 1)
    await runtime.memory.drain(5)


def at(channel: str, user: str, text: str, **fields: Any) -> Inbound:
    return message(chat_id=channel, user_id=user, user_name=f"U{user}", text=text,
                   mentions_bot=True, **fields)  # fmt: skip


async def test_a_member_is_remembered_in_any_channel_of_the_server_for_them_alone(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, BINDINGS)
        async with running(config, RecordingPlatform("discord")) as (runtime, platform):
            # 702's history starts before Ann's line: what it holds is not all she said.
            await ask(runtime, platform, at("702", BOB, "good morning"))
            await ask(runtime, platform, at("700", ANN, "my cat is called Pumpernickel"))
            await ask(runtime, platform, at("701", BOB, "what is the cat called?"))
            bob_asks = model.requests[-1]
            await ask(runtime, platform, at("702", ANN, "what is my cat called?"))
            ann_asks = model.requests[-1]
            dm = at("800", ANN, "what is my cat called?", is_dm=True, guild_id=None)
            await ask(runtime, platform, dm)
            in_dm = model.requests[-1]
            await ask(runtime, platform,
                      at("700", ANN, "what is my cat called?", guild_id=OTHER_GUILD))  # fmt: skip
            elsewhere = model.requests[-1]
            scopes = await runtime.memory.store.scopes_after("lark", {})
            ann = await runtime.memory.store.after("lark", "member:discord:900:11", 0)
    recalled = "Pumpernickel"
    assert recalled in said(ann_asks)  # channel 702 never heard it: recalled
    [block] = [t for t in user_texts(ann_asks) if t.startswith("Memories that may be relevant")]
    assert recalled in block
    assert recalled not in said(bob_asks)
    assert recalled not in said(in_dm)
    assert recalled not in said(elsewhere)
    # Only what each member said, in their own scope; no reply, no place of its own.
    assert set(scopes) == {"member:discord:900:11", "member:discord:900:12",
                           "user:discord:11", "chat:discord:700"}  # fmt: skip
    assert [(t.speaker, t.session) for t in ann] == [("user", "discord:700"),
                                                     ("user", "discord:702")]  # fmt: skip


async def test_nothing_said_in_a_dm_reaches_the_member_scope(tmp_path: Path) -> None:
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, BINDINGS)
        async with running(config, RecordingPlatform("discord")) as (runtime, platform):
            dm = at("800", ANN, "my bank pin is Zanzibar", is_dm=True, guild_id=None)
            await ask(runtime, platform, dm)
            await ask(runtime, platform, at("700", ANN, "what is my bank pin?"))
            asked = model.requests[-1]
            scopes = await runtime.memory.store.scopes_after("lark", {})
    assert "bank pin" in said(asked) and "Zanzibar" not in said(asked)
    assert scopes == ["member:discord:900:11", "user:discord:11"]


async def test_a_turn_answering_several_people_reads_no_members_memory(tmp_path: Path) -> None:
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, BINDINGS)
        async with running(config, RecordingPlatform("discord")) as (runtime, platform):
            await ask(runtime, platform, at("701", ANN, "my dog is called Biscotti"))
            await ask(runtime, platform, at("701", BOB, "my dog is called Tiramisu"))
            gate = model.script_gate()
            await platform.hear(at("700", ANN, "hello there"))
            await gate.reached.wait()  # the first turn runs: the next two wait together
            await platform.hear(at("700", ANN, "what is my dog called?"))
            await platform.hear(at("700", BOB, "and what is my dog called?"))
            await runtime.router.wait(5)
            gate.open()
            await platform.replies(4)
            batch = model.requests[-1]
            await ask(runtime, platform, at("700", BOB, "what is my dog called?"))
            alone = model.requests[-1]
    assert user_texts(batch)[-2:] == ["U11: what is my dog called?",
                                      "U12: and what is my dog called?"]  # fmt: skip
    assert "Biscotti" not in said(batch) and "Tiramisu" not in said(batch)
    assert "Tiramisu" in said(alone) and "Biscotti" not in said(alone)


async def test_forget_in_the_server_erases_the_callers_member_scope_only(tmp_path: Path) -> None:
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, BINDINGS)
        async with running(config, RecordingPlatform("discord")) as (runtime, platform):
            await ask(runtime, platform, at("700", ANN, "my cat is called Pumpernickel"))
            await ask(runtime, platform, at("700", BOB, "my cat is called Strudel"))
            await runtime.memory.compile_one("lark", "member:discord:900:11")
            folder = tmp_path / "data" / "memory" / "lark" / "member" / "discord" / "900"
            assert (folder / ANN / "index.md").is_file()  # a member's wiki compiles
            await ask(runtime, platform, at("701", ANN, "/forget"))
            await ask(runtime, platform, at("701", ANN, "/forget confirm"))
            store = runtime.memory.store
            left = {s: await store.count("lark", s) for s in ("member:discord:900:11",
                                                              "member:discord:900:12")}  # fmt: skip
            history = await runtime.sessions._parts.store.load("discord:700")
            await ask(runtime, platform, at("702", ANN, "what is my cat called?"))
            asked = model.requests[-1]
    replies = [m.text for m in platform.sent]
    assert replies[-3:-1] == [prompts.FORGET_ASK_MEMBER, prompts.FORGET_DONE_MEMBER]
    assert left["member:discord:900:11"] == 0 and left["member:discord:900:12"] == 1
    assert not (folder / ANN).exists()
    assert "Pumpernickel" in " ".join(e.text for e in history.entries)  # the channel's, kept
    assert "Pumpernickel" not in said(asked)


async def test_memory_in_a_dm_lists_exports_drops_and_forgets_member_memory(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, BINDINGS)
        async with running(config, RecordingPlatform("discord")) as (runtime, platform):
            await ask(runtime, platform, at("700", ANN, "my cat is called Pumpernickel"))
            await ask(runtime, platform, at("700", BOB, "my cat is called Strudel"))
            await runtime.memory.compile_one("lark", "member:discord:900:11")

            async def dm(text: str) -> str:
                await ask(runtime, platform, at("800", ANN, text, is_dm=True, guild_id=None))
                return platform.sent[-1].text

            listed = await dm("/memory")
            one = await dm(f"/memory server {GUILD}")
            exported = await dm(f"/memory server {GUILD} export")
            file = platform.sent[-2].attachment
            bad = await dm("/memory server ../901")
            asked = await dm(f"/memory server {GUILD} forget")
            done = await dm(f"/memory server {GUILD} forget confirm")
            after = await dm("/memory")
            left = await runtime.memory.store.scopes_after("lark", {})
            bob = await runtime.memory.store.count("lark", "member:discord:900:12")
    assert prompts.MEMORY_SERVERS in listed
    assert listed.count("- discord ") == 1  # Ann's server, not Bob's memory
    assert one.startswith(prompts.MEMORY_SERVER_HEAD.format(platform="discord", server=GUILD))
    assert "Strudel" not in listed + one
    assert file is not None and b"Pumpernickel" in file.data and b"Strudel" not in file.data
    assert file.filename.startswith(f"memory-lark-server-{GUILD}-")
    assert exported.startswith("That file is everything")
    assert bad == prompts.MEMORY_BAD_SERVER.format(server="../901")
    assert asked == prompts.MEMORY_SERVER_FORGET_ASK.format(platform="discord", server=GUILD)
    assert done == prompts.MEMORY_SERVER_FORGOTTEN.format(platform="discord", server=GUILD)
    assert prompts.MEMORY_SERVERS not in after
    assert bob == 1 and "member:discord:900:12" in left


async def test_unaddressed_lines_remembered_go_to_their_speakers_scope(tmp_path: Path) -> None:
    extra = BINDINGS + "groups: {remember_unaddressed: true}\n"
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, extra)
        async with running(config, RecordingPlatform("discord")) as (runtime, platform):
            await platform.hear(message(user_id=BOB, text="my hamster is Gnocchi"))
            await runtime.router.wait(5)
            await runtime.memory.drain(5)
            scopes = await runtime.memory.store.scopes_after("lark", {})
    assert model.requests == [] and scopes == ["member:discord:900:12"]


async def test_a_per_member_place_has_no_heartbeat(tmp_path: Path) -> None:
    heart = (
        "---\nagentId: lark\nname: Lark\n---\n# SOUL.md\n\n<!-- SOUL_META -->\n- version: 1.0.0\n"
        "- update_count: 0\n- min_conversation_tokens: 1\n\n<!-- SOUL_CORE -->\nYou are Lark.\n"
        "\n<!-- SOUL_MEMORY -->\n## Memory\n\n<!-- SOUL_AUTOBIOGRAPHY -->\n## Autobiography\n"
    )
    (tmp_path / "workspaces" / "lark").mkdir(parents=True)
    (tmp_path / "workspaces" / "lark" / "SOUL.md").write_text(heart)
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, BINDINGS)
        async with running(config, RecordingPlatform("discord")) as (runtime, platform):
            await ask(runtime, platform, at("700", ANN, "my cat is called Pumpernickel"))
            await ask(runtime, platform, at("800", ANN, "hello", is_dm=True, guild_id=None))
            await runtime.reflector.flush()
    channel, dm = model.requests[0], model.requests[1]
    tools = [[t["name"] for t in r.get("tools", [])] for r in (channel, dm)]
    assert "end_conversation" not in tools[0] and "end_conversation" in tools[1]
    reflected = [r for r in model.requests if r.get("tool_choice", {}).get("name") == "save_soul"]
    assert len(reflected) == 1 and "Pumpernickel" not in said(reflected[0])
