"""The DM gate: open, allowlist, pairing (codes, limits, expiry, persistence)."""

from __future__ import annotations

from pathlib import Path

from bot import prompts
from bot.chat.access import CODE_ALPHABET, CODE_LENGTH, MAX_PENDING, PAIRING_TTL_S, Access
from bot.config.load import parse_config
from bot.storage.db import Database
from bot.types import Inbound


def dm(user: str, platform: str = "telegram") -> Inbound:
    return Inbound(platform=platform, chat_id=f"c{user}", user_id=user, user_name=f"N{user}",
                   text="hi", is_dm=True)  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def access(db: Database, yaml: str = "", clock: Clock | None = None) -> Access:
    return Access(db, parse_config(yaml, "t", {}), clock or Clock())


def code_of(reply: str) -> str:
    word = reply.split("Your pairing code is ")[1].split()[0]
    assert len(word) == CODE_LENGTH and set(word) <= set(CODE_ALPHABET)
    return word


async def test_open_admits_everyone(db: Database) -> None:
    gate = access(db, "adapters: {telegram: {dm_policy: open}}")
    assert (await gate.admit(dm("5"))).admitted


async def test_allowlist_admits_listed_ids_and_admins_only(db: Database) -> None:
    gate = access(
        db, "admins: {telegram: [1]}\nadapters: {telegram: {dm_policy: allowlist, allowlist: [2]}}"
    )
    assert (await gate.admit(dm("1"))).admitted
    assert (await gate.admit(dm("2"))).admitted
    refused = await gate.admit(dm("3"))
    assert not refused.admitted and refused.reply == prompts.ALLOWLIST_ONLY
    assert await gate.pending() == []  # an allowlist hands out no codes


async def test_pairing_gives_one_code_per_person_and_approval_admits(db: Database) -> None:
    gate = access(db)  # pairing is the default
    first = await gate.admit(dm("7"))
    assert not first.admitted
    code = code_of(first.reply)
    assert code_of((await gate.admit(dm("7"))).reply) == code  # the same code again
    assert [p.user_id for p in await gate.pending()] == ["7"]
    assert await gate.approve("WRONGCOD", "telegram:1") is None
    approved = await gate.approve(code.lower(), "telegram:1")  # any case
    assert approved is not None and approved.chat_id == "c7" and approved.user_name == "N7"
    assert (await gate.admit(dm("7"))).admitted
    assert await gate.approve(code, "telegram:1") is None  # one-time
    assert not (await gate.admit(dm("7", platform="discord"))).admitted  # per platform


async def test_a_full_pool_drops_the_oldest_code_and_codes_expire_after_an_hour(
    db: Database,
) -> None:
    clock = Clock()
    gate = access(db, clock=clock)
    codes = []
    for user in range(MAX_PENDING):
        codes.append(code_of((await gate.admit(dm(str(user)))).reply))
        clock.now += 1
    assert code_of((await gate.admit(dm("0"))).reply) == codes[0]  # asking again: same code
    newcomer = code_of((await gate.admit(dm("newcomer"))).reply)  # the pool is full
    waiting = [p.code for p in await gate.pending()]
    assert len(waiting) == MAX_PENDING and waiting == [*codes[1:], newcomer]
    assert await gate.approve(codes[0], "telegram:1") is None  # the oldest was dropped
    assert (await gate.admit(dm("other", platform="discord"))).reply  # pools are per platform
    assert len(await gate.pending()) == MAX_PENDING + 1
    clock.now += PAIRING_TTL_S + 1
    assert await gate.pending() == []
    late = code_of((await gate.admit(dm("99"))).reply)
    assert [p.code for p in await gate.pending()] == [late]


async def test_deny_drops_a_waiting_code_and_a_new_ask_gets_a_new_one(db: Database) -> None:
    gate = access(db)
    code = code_of((await gate.admit(dm("7"))).reply)
    denied = await gate.deny(code.lower(), "telegram:1")
    assert denied is not None and (denied.user_id, denied.user_name) == ("7", "N7")
    assert await gate.pending() == []
    assert await gate.deny(code, "telegram:1") is None
    assert await gate.approve(code, "telegram:1") is None
    again = code_of((await gate.admit(dm("7"))).reply)
    assert again != code


async def test_revoke_gates_the_person_again_at_once(db: Database) -> None:
    clock = Clock()
    gate = access(db, clock=clock)
    code = code_of((await gate.admit(dm("7"))).reply)
    await gate.approve(code, "telegram:1")
    assert (await gate.admit(dm("7"))).admitted  # the approved set is now cached
    [approval] = await gate.approved()
    assert (approval.platform, approval.user_id) == ("telegram", "7")
    assert (approval.approved_at, approval.approved_by) == (clock.now, "telegram:1")
    assert await gate.revoke("telegram", "7", "telegram:1")
    assert not (await gate.admit(dm("7"))).admitted
    assert await gate.approved() == []
    assert not await gate.revoke("telegram", "7", "telegram:1")  # nothing left to revoke
    assert not await access(db).revoke("discord", "7", "telegram:1")


def test_the_config_alone_admits_admins_the_allowlist_and_everyone_when_open() -> None:
    config = (
        "admins: {telegram: [1]}\n"
        "adapters: {telegram: {allowlist: [2]}, discord: {dm_policy: open}}"
    )
    gate = Access(None, parse_config(config, "t", {}))  # type: ignore[arg-type]
    assert gate.configured("telegram", "1") and gate.configured("telegram", "2")
    assert not gate.configured("telegram", "3") and gate.configured("discord", "3")


async def test_an_expired_code_cannot_be_approved(db: Database) -> None:
    clock = Clock()
    gate = access(db, clock=clock)
    code = code_of((await gate.admit(dm("7"))).reply)
    clock.now += PAIRING_TTL_S
    assert await gate.approve(code, "telegram:1") is None
    assert not (await gate.admit(dm("7"))).admitted


async def test_approvals_survive_a_restart(tmp_path: Path) -> None:
    first = Database(tmp_path / "soulbot.db")
    await first.open()
    gate = access(first)
    code = code_of((await gate.admit(dm("7"))).reply)
    assert await gate.approve(code, "telegram:1") is not None
    await first.close()
    again = Database(tmp_path / "soulbot.db")
    await again.open()
    try:
        assert (await access(again).admit(dm("7"))).admitted
        assert not (await access(again).admit(dm("8"))).admitted
    finally:
        await again.close()


def test_admins_are_per_platform_and_the_console_is_one(tmp_path: Path) -> None:
    gate = Access(None, parse_config("admins: {telegram: [1], discord: [2]}", "t", {}))  # type: ignore[arg-type]
    assert gate.is_admin("telegram", "1") and not gate.is_admin("telegram", "2")
    assert gate.is_admin("discord", "2") and not gate.is_admin("discord", "1")
    assert gate.is_admin("console", "anyone")
    assert not gate.is_admin("telegram", "not-a-number")
