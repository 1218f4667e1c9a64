"""Fault drill: `soulbot run` as a process through a model outage, a model that
hangs, a SIGKILL in the middle of a compile or of a turn or between a reply's store
and its send, a full disk under a page write and under a reply's write, and a flood
of 1,000 Telegram messages. The fakes
(model, Telegram) run in this process; the daemon is the real one, with its JSON
log on stderr. A full disk is RLIMIT_FSIZE in the daemon (a write past it fails
as on a full disk, "File too large"): its soft limit only, so the drill can lift
it from outside (`Bot.fill_disk`, `Bot.free_disk`) while the daemon runs."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import re
import resource
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bot import prompts
from bot.memory.page import parse_page
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import example_souls, user_texts

PREFIX = "Wren> "  # the console's reply prefix; continuation lines are indented as wide
T = TypeVar("T")
STARTED: list[asyncio.subprocess.Process] = []


@pytest.fixture(autouse=True)
def no_daemon_left() -> Iterator[None]:
    """The last resort when a test is stopped from outside (pytest-timeout)
    before its `finally` runs: no daemon outlives its test."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)


def drill_folder(tmp_path: Path, config: str = "") -> Path:
    """`tmp_path` with a copy of the workspaces and a soulbot.yaml (wren, no retries
    unless `config` has a `model:` of its own)."""
    example_souls(tmp_path)
    model = "" if "model:" in config else "model: {max_retries: 0}\n"
    (tmp_path / "soulbot.yaml").write_text("default_soul: wren\n" + model + config)
    return tmp_path


def drill_env(model: FakeAnthropic, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
    return env | {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "test-key"} | extra


def parse_log(text: str) -> dict[str, Any] | None:
    """One stderr line as a log event; None for a line that is not JSON."""
    if not text.startswith("{"):
        return None
    try:
        event = json.loads(text)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class Bot:
    """A `soulbot run` process: stdout lines in `lines`, stderr log events in
    `events`, both read by tasks that wake the waits on every line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._open = 2
        self._readers = [
            asyncio.create_task(self._read(proc.stdout, self.lines.append)),
            asyncio.create_task(self._read(proc.stderr, self._log)),
        ]

    def _log(self, line: str) -> None:
        event = parse_log(line)
        if event is not None:
            self.events.append(event)

    async def _read(self, stream: asyncio.StreamReader, keep: Callable[[str], None]) -> None:
        while raw := await stream.readline():
            keep(raw.decode().rstrip("\n"))
            self._wake()
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def until(
        self, found: Callable[[], T | None], what: str, within: float = 20, poll: float = 60
    ) -> T:
        """Wait for `found()` to return something, re-checked on every line read
        and every `poll` seconds (for state with no event, such as files).
        Raises TimeoutError after `within` seconds, AssertionError when the
        process's output has ended first."""
        deadline = asyncio.get_running_loop().time() + within
        while (result := found()) is None:
            remaining = deadline - asyncio.get_running_loop().time()
            last = f"last events: {self.names()[-8:]}"
            if not self._open:
                raise AssertionError(f"the daemon's output ended before {what}; {last}")
            if remaining <= 0:
                raise TimeoutError(f"waited {within:g} s for {what}; {last}")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, poll)):
                    await self._changed.wait()
        return result

    def matching(self, name: str, **fields: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e.get("event") == name and all(e.get(k) == v for k, v in fields.items())
        ]

    async def wait_event(
        self, name: str, count: int = 1, within: float = 20, **fields: Any
    ) -> dict[str, Any]:
        """The `count`-th event `name` with those field values."""

        def found() -> dict[str, Any] | None:
            hits = self.matching(name, **fields)
            return hits[count - 1] if len(hits) >= count else None

        return await self.until(found, f"{name} #{count} {fields or ''}", within)

    def names(self) -> list[str]:
        return [str(e.get("event")) for e in self.events]

    def replies(self) -> list[str]:
        """The console replies so far, each as its text (continuation lines joined)."""
        out: list[str] = []
        for line in self.lines:
            if line.startswith(PREFIX):
                out.append(line[len(PREFIX) :])
            elif out:
                out[-1] += "\n" + line.removeprefix(" " * len(PREFIX))
        return out

    async def wait_reply(self, line: str, within: float = 20) -> str:
        """The console reply with `line` as one of its lines."""

        def found() -> str | None:
            return next((r for r in self.replies() if line in r.split("\n")), None)

        return await self.until(found, f"a reply with the line {line!r}", within)

    async def wait_replies(self, count: int, within: float = 20) -> list[str]:
        def found() -> list[str] | None:
            replies = self.replies()
            return replies if len(replies) >= count else None

        return await self.until(found, f"{count} replies", within)

    async def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()

    async def stop(self, signum: int = signal.SIGTERM, within: float = 30) -> int:
        """Send `signum` and wait for the exit; returns the exit code."""
        self.proc.send_signal(signum)
        async with asyncio.timeout(within):
            code = await self.proc.wait()
            await asyncio.gather(*self._readers)
        return code

    def fill_disk(self, data: Path, room: int) -> None:
        """Leave `room` bytes on the disk: a write past the end of the largest
        file in `data`, plus `room`, fails."""
        used = max(p.stat().st_size for p in data.rglob("*") if p.is_file())
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (used + room, hard))

    def free_disk(self) -> None:
        """Lift the process's file size limit (the disk has room again)."""
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))

    async def close(self) -> None:
        """Kill the process if it still runs and wait for it and the readers."""
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)


@asynccontextmanager
async def running(
    cwd: Path, env: dict[str, str], max_file_bytes: int | None = None
) -> AsyncIterator[Bot]:
    """`soulbot run` started and serving (`daemon.started`); killed at the end
    if it still runs. `max_file_bytes` sets the soft RLIMIT_FSIZE of the process."""

    def limit_files() -> None:
        assert max_file_bytes is not None
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, hard))

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--log-format", "json",
        cwd=cwd, env=env, limit=2**22,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=limit_files if max_file_bytes else None,
    )  # fmt: skip
    STARTED.append(proc)
    bot = Bot(proc)
    try:
        await bot.wait_event("daemon.started", within=30)
        yield bot
    finally:
        await bot.close()


async def soulbot(
    cwd: Path, env: dict[str, str], *args: str
) -> tuple[int, str, list[dict[str, Any]]]:
    """Run a `soulbot` command to its end: exit code, stdout, log events."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, "--log-format", "json",
        cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    events = [e for e in map(parse_log, err.decode().splitlines()) if e is not None]
    assert proc.returncode is not None
    return proc.returncode, out.decode(), events


def query(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# The system prompts of background calls (the compile's, a compaction's...).
BACKGROUND = {text for name, text in vars(prompts).items() if name.endswith("_SYSTEM")}


def turn_requests(model: FakeAnthropic) -> list[dict[str, Any]]:
    """The requests of turns (background calls left out)."""
    return [r for r in model.requests if r["system"][0]["text"] not in BACKGROUND]


def assert_answered_once(db: Path) -> None:
    """Every stored message has one stored answer: a reply answers the messages
    since the one before it, up to its `reply_to`, so the `reply_to`s are
    distinct (nothing answered twice) and the last is the newest message's
    (nothing left unanswered)."""
    sql = "SELECT role, id, reply_to FROM history WHERE kind IN ('message', 'compacted')"
    rows = query(db, sql + " ORDER BY id")
    users = [id_ for role, id_, _ in rows if role == "user"]
    answers = [reply_to for role, _, reply_to in rows if role == "assistant"]
    assert len(answers) == len(set(answers)), f"a message answered twice: {answers}"
    assert set(answers) <= set(users), f"an answer to no stored message: {answers} {users}"
    assert answers and max(answers) == users[-1], f"unanswered: {users} {answers}"


def scope_traces(db: Path, scope: str) -> list[int]:
    """The ids of wren's traces in `scope` (page chunks left out), in order."""
    rows = query(
        db,
        "SELECT m.id FROM memory m JOIN memory_scopes s ON m.id >> 32 = s.id "
        "WHERE s.soul = 'wren' AND s.scope = ? AND m.page IS NULL ORDER BY m.id",
        scope,
    )
    return [row[0] for row in rows]


def console_scope() -> str:
    """The memory scope of the console's user (the login name, as the adapter takes it)."""
    try:
        return f"user:console:{getpass.getuser()}"
    except (KeyError, OSError):
        return "user:console:local"


def watermark(wiki: Path) -> int:
    meta = wiki / ".meta" / "index.json"
    return int(json.loads(meta.read_text()).get("watermark", 0)) if meta.exists() else 0


def page_files(wiki: Path) -> dict[str, Path]:
    """Every page file of the wiki by id (index.md and dot-folders left out)."""
    return {
        path.relative_to(wiki).with_suffix("").as_posix(): path
        for path in wiki.rglob("*.md")
        if path.name != "index.md" and not any(p.startswith(".") for p in path.parts)
    }


# -- 1. the model is down for 30 s, then back ------------------------------------------

OUTAGE_S = 30.0
EVERY_S = 3.0


@pytest.mark.timeout(120)
async def test_model_down_for_30_s_then_back(tmp_path: Path) -> None:
    cwd = drill_folder(tmp_path)
    async with FakeAnthropic() as model, running(cwd, drill_env(model)) as bot:
        start = time.monotonic()
        model.fail_until(start + OUTAGE_S)  # every request is a 529 until then
        during = []
        for i in range(int(OUTAGE_S // EVERY_S)):
            await asyncio.sleep(max(0.0, start + i * EVERY_S - time.monotonic()))  # the pace
            text = f"outage message {i:02d} about topic-{i:02d}"
            during.append(text)
            await bot.say(text)
            await bot.wait_replies(i + 1)
            await bot.wait_event("turn.failed", count=i + 1)
        assert time.monotonic() < start + OUTAGE_S, "the last message came after the outage"
        assert bot.replies() == [prompts.APOLOGY] * len(during)
        await asyncio.sleep(max(0.0, start + OUTAGE_S - time.monotonic()))  # the outage ends
        assert not model.down
        after = ["after the outage: first", "after the outage: second"]
        for text in after:
            await bot.say(text)
            await bot.wait_reply(text)
        assert bot.proc.returncode is None
        code = await bot.stop()

    assert code == 0
    assert bot.names()[-1] == "daemon.stopped"
    replies = bot.replies()
    assert replies[: len(during)] == [prompts.APOLOGY] * len(during)
    assert len(replies) == len(during) + len(after)
    for reply, text in zip(replies[len(during) :], after, strict=True):
        assert reply.startswith("echo: ") and text in reply.split("\n")
    failed = bot.matching("turn.failed")
    assert len(failed) == len(during)
    assert {e["error_class"] for e in failed} == {"OverloadedError"}
    assert len(bot.matching("turn.completed")) == len(after)
    assert not {"session.error", "shutdown.pending", "shutdown.task_failed"} & set(bot.names())
    # One request per failed turn (no retries), then the first real answer's
    # request carries every message the apologies answered: nothing is lost.
    turns = turn_requests(model)
    assert len(turns) == len(during) + len(after)
    first_back = user_texts(turns[len(during)])
    assert all(text in first_back for text in [*during, after[0]])
    assert all(text in replies[len(during)] for text in during)
    stored = query(cwd / "data" / "soulbot.db", "SELECT content FROM history WHERE role = 'user'")
    assert [row[0] for row in stored] == during + after


# -- 2. SIGKILL in the middle of the shutdown compile, then a restart ------------------

TOPICS = {
    "Lisbon": "Ann moved to Lisbon in March and likes the trams.",
    "Cello": "Ann plays the cello on Sundays with a quartet.",
    "Marathon": "Ann is training for the Porto marathon in November.",
    "Sourdough": "Ann bakes sourdough and named her starter Gerald.",
    "Kestrel": "Ann saw a kestrel nesting on her balcony.",
}


async def test_a_sigkill_in_a_compile_loses_nothing(tmp_path: Path) -> None:
    cwd = drill_folder(tmp_path)
    scope = console_scope()
    wiki = cwd.joinpath("data", "memory", "wren", *scope.split(":"))
    db = cwd / "data" / "soulbot.db"
    traces = cwd / "traces.jsonl"
    an_hour_ago = time.time() - 3600
    rows = [
        {"text": text, "speaker": "user", "name": "Ann", "created_at": an_hour_ago,
         "entities": [name]}
        for name, text in TOPICS.items()
    ]  # fmt: skip
    traces.write_text("".join(json.dumps(row) + "\n" for row in rows))
    async with FakeAnthropic() as model:
        env = drill_env(model)
        code, out, _ = await soulbot(cwd, env, "memory", "import", "wren", str(traces),
                                     "--scope", scope)  # fmt: skip
        assert code == 0, out
        async with running(cwd, env) as bot:
            for text in ("I repaired my bicycle chain today", "my sister visits from Oslo"):
                await bot.say(text)
                await bot.wait_reply(text)
            model.configure(latency_s=1.5)  # every compile call now takes 1.5 s
            bot.proc.send_signal(signal.SIGTERM)
            await bot.wait_event("llm.usage", source="compile")
            # The first page is renamed into place right after its call, then its
            # folds are recorded; the kill lands during the second page's call (a
            # kill between the two would fold the page's traces into it again at the
            # next start: a fact twice, never a fact lost).
            first = await bot.until(
                lambda: next(iter(page_files(wiki)), None), "a page file", poll=0.01
            )
            await bot.until(
                lambda: query(db, "SELECT 1 FROM memory_folds WHERE page = ?", first) or None,
                "the first page's folds", poll=0.01,
            )  # fmt: skip
            bot.proc.kill()
            assert await bot.proc.wait() == -signal.SIGKILL
        killed_pages = page_files(wiki)
        assert list(killed_pages) == [first]
        first_text = killed_pages[first].read_text()
        assert parse_page(first_text, first).body.endswith("The full new page body:\n")
        assert watermark(wiki) == 0, "the watermark moved before the compile finished"
        assert "wiki.compiled" not in bot.names()
        leftovers = sorted(p.name for p in wiki.rglob(".wiki-*.tmp"))

        model.configure(latency_s=0)
        async with running(cwd, env) as again:
            assert await again.stop() == 0
        assert again.names()[-1] == "daemon.stopped"

    assert leftovers == []
    ids = scope_traces(db, scope)
    assert len(ids) == len(TOPICS) + 4  # the imports, two messages and two replies
    [done] = again.matching("wiki.compiled", scope=scope)
    assert done["traces_folded"] == len(ids)
    # An entity page each and concepts/notes, less the page whole before the kill:
    # it holds its traces already and is not merged again.
    assert done["pages_written"] == len(TOPICS)
    assert watermark(wiki) == ids[-1]
    pages = page_files(wiki)
    assert pages[first].read_text() == first_text  # not merged a second time
    assert set(pages) >= {f"entities/{name.lower()}" for name in TOPICS} | {"concepts/notes"}
    for page_id, path in pages.items():
        page = parse_page(path.read_text(), page_id)
        assert len(set(page.sources)) == len(page.sources)
        if not page_id.startswith("log/"):  # the fake echoes the compile prompt whole
            assert page.body.endswith("The full new page body:\n"), f"{page_id} is cut short"
    for name, text in TOPICS.items():
        assert text in pages[f"entities/{name.lower()}"].read_text()
    # One log page a day: a run near midnight (UTC) spreads the traces over two.
    days = "".join(path.read_text() for page, path in pages.items() if page.startswith("log/"))
    assert all(days.count(text) == 1 for text in TOPICS.values())
    meta = json.loads((wiki / ".meta" / "index.json").read_text())
    assert set(meta["hashes"]) == set(pages)
    index = (wiki / "index.md").read_text()
    assert index.startswith("# Memory Index\n")
    # The catalog gives the daily logs one line, the newest's.
    logs = sorted(page for page in pages if page.startswith("log/"))
    listed = set(pages) - set(logs[:-1])
    assert set(re.findall(r"^- \[\[([^\]]+)\]\]: ", index, re.MULTILINE)) == listed
    assert not list(wiki.rglob(".wiki-*.tmp"))
    assert query(db, "PRAGMA integrity_check") == [("ok",)]


# -- 3. the disk fills up under a page write -------------------------------------------

MAX_FILE = 4 * 2**20  # RLIMIT_FSIZE of the daemon: the database stays far below it
HUGE_PAGE = "x" * (MAX_FILE + 4 * 2**20)
# The fake counts a page of megabytes as millions of output tokens, past a soul's
# default daily budget: without budgets, the next turns are not refused for it.
NO_BUDGET = (
    "budget: {daily_tokens_per_soul: null, daily_tokens_per_user: null,"
    " daily_tokens_per_admin: null, daily_tokens_background: null}\n"
)
# The fake ends an answer at max_tokens as the API does: room for a page past MAX_FILE
# (a chat answer, a compile's answer, a page under its cap).
BIG_ANSWERS = "model: {max_retries: 0, max_tokens: 4000000}\n"
BIG_PAGES = "memory: {page_max_tokens: 4000000, compile: {max_tokens: 4000000}}\n"


def huge_pages(body: dict[str, Any]) -> Reply | None:
    """A page body past the file size limit for every compile call."""
    return Reply.of_text(HUGE_PAGE) if body["system"][0]["text"] == prompts.COMPILE_SYSTEM else None


async def disk_full_compile(bot: Bot, model: FakeAnthropic) -> str:
    """Talk, then `/soul compile` with a page too large to write; the report line."""
    for text in ("I water the ferns on Mondays", "the blue kettle whistles"):
        await bot.say(text)
        await bot.wait_reply(text)
    model.responder = huge_pages
    await bot.say("/soul compile")
    await bot.wait_reply(prompts.COMPILE_STARTED.format(souls="every soul"))
    failed = await bot.wait_event("wiki.compile_failed")
    assert failed["error_class"] == "OSError" and "File too large" in failed["error"], failed
    return (await bot.wait_replies(4))[3]


async def test_a_sigkill_mid_turn_then_a_restart_answers_once(tmp_path: Path) -> None:
    cwd = drill_folder(tmp_path, NO_BUDGET)
    async with FakeAnthropic() as model:
        env = drill_env(model)
        async with running(cwd, env) as bot:
            await bot.say("first, a warm-up")
            await bot.wait_reply("first, a warm-up")
            model.script_hang(60)  # the model hangs: the turn is in flight
            await bot.say("are you still there after the crash?")
            await bot.until(lambda: len(model.requests) == 2 or None, "the hanging request")
            bot.proc.kill()
            assert await bot.proc.wait() == -signal.SIGKILL
        assert [r for r in bot.replies() if "crash" in r] == []
        async with running(cwd, env) as again:
            reply = await again.wait_reply("are you still there after the crash?")
            assert await again.stop() == 0
    assert reply.startswith("echo: ")
    [recovered] = again.matching("sessions.recovered")
    assert recovered["sessions"] == 1
    # Once: the warm-up, answered before the kill, is not answered again.
    assert [r for r in again.replies() if "warm-up" in r] == []
    assert len(again.replies()) == 1
    assert_answered_once(cwd / "data" / "soulbot.db")


async def test_a_full_disk_stops_the_compile_and_the_bot_answers_on(tmp_path: Path) -> None:
    cwd = drill_folder(tmp_path, NO_BUDGET + BIG_ANSWERS + BIG_PAGES)
    scope = console_scope()
    wiki = cwd.joinpath("data", "memory", "wren", *scope.split(":"))
    db = cwd / "data" / "soulbot.db"
    async with FakeAnthropic() as model:
        env = drill_env(model)
        async with running(cwd, env, max_file_bytes=MAX_FILE) as bot:
            await disk_full_compile(bot, model)
            await bot.say("still there after the disk filled up?")
            reply = await bot.wait_reply("still there after the disk filled up?")
            assert reply.startswith("echo: ")
            assert watermark(wiki) == 0
            assert not page_files(wiki) and not list(wiki.rglob(".wiki-*.tmp"))
            stored = sum(p.stat().st_size for p in db.parent.glob("soulbot.db*"))
            assert stored < MAX_FILE // 4, f"the database is {stored} bytes: too close to the limit"
            assert await bot.stop() == 0  # its shutdown compile fails the same way
        assert len(bot.matching("wiki.compile_failed")) == 2
        assert bot.names()[-1] == "daemon.stopped"
        assert not {"session.error", "turn.failed"} & set(bot.names())

        model.responder = None
        code, out, events = await soulbot(cwd, env, "compile", "wren")
    assert code == 0, out
    ids = scope_traces(db, scope)
    assert len(ids) == 6  # three messages and three replies; the command is no trace
    [done] = [e for e in events if e["event"] == "wiki.compiled"]
    assert done["scope"] == scope and done["traces_folded"] == len(ids)
    assert watermark(wiki) == ids[-1]
    notes = parse_page((wiki / "concepts" / "notes.md").read_text(), "concepts/notes")
    assert "still there after the disk filled up?" in notes.body


async def test_a_failed_compile_is_reported_as_failed(tmp_path: Path) -> None:
    cwd = drill_folder(tmp_path, NO_BUDGET + BIG_ANSWERS + BIG_PAGES)
    async with FakeAnthropic() as model, running(cwd, drill_env(model), MAX_FILE) as bot:
        report = await disk_full_compile(bot, model)
    assert report.startswith("The compile failed for 1 wiki(s); their traces wait"), report
    assert "File too large" in report and report.endswith(
        "Compile done: 0 wikis, 0 new traces folded into 0 pages."
    )


# -- 4. 50 Telegram chats x 20 messages at once ----------------------------------------

CHATS, MESSAGES = 50, 20
TOKEN = re.compile(r"\bs(\d\d)-m(\d\d)\b")


async def test_1000_telegram_messages_at_once(tmp_path: Path) -> None:
    async with FakeTelegram() as tg, FakeAnthropic() as model:
        cwd = drill_folder(
            tmp_path,
            "adapters:\n  console: {enabled: false}\n"
            f"  telegram: {{token: '${{TELEGRAM_TOKEN}}', base_url: '{tg.base_url}',"
            " dm_policy: open}\n",
        )
        env = drill_env(model, TELEGRAM_TOKEN=tg.token)
        async with running(cwd, env) as bot:
            texts = [f"s{s:02d}-m{m:02d}" for m in range(1, MESSAGES + 1) for s in range(CHATS)]
            started = time.monotonic()
            for text in texts:  # every message queued before the bot's next poll
                chat = 100 + int(text[1:3])
                tg.push_message(chat, text, user_id=chat, first_name=f"User {text[1:3]}")
            seen: set[str] = set()
            read = 0

            def all_answered(fake: FakeTelegram) -> bool:
                nonlocal read
                for call in fake.calls[read:]:
                    if call.method == "sendMessage" and call.status == 200:
                        seen.update(m[0] for m in TOKEN.finditer(call.params["text"]))
                read = len(fake.calls)
                return seen >= set(texts)

            await tg.wait_for(all_answered, timeout=45, what="a reply to every message")
            answered_s = time.monotonic() - started
            code = await bot.stop()

    print(f"1,000 messages answered in {answered_s:.1f} s with {len(tg.sent)} replies")
    assert code == 0
    assert bot.names()[-1] == "daemon.stopped"
    bad = {"session.error", "turn.failed", "adapter.error", "shutdown.pending"}
    assert not bad & set(bot.names())
    by_chat: dict[int, list[str]] = {}
    for sent in tg.sent:
        chat = int(sent["chat_id"])
        found = TOKEN.findall(sent["text"])
        assert found, f"a reply without a message in it: {sent['text']!r}"
        assert {100 + int(s) for s, _ in found} == {chat}, "a reply carries another chat's text"
        by_chat.setdefault(chat, []).extend(f"s{s}-m{m}" for s, m in found)
    for s in range(CHATS):  # each text once, in the order sent
        assert by_chat[100 + s] == [f"s{s:02d}-m{m:02d}" for m in range(1, MESSAGES + 1)]
    db = cwd / "data" / "soulbot.db"
    users = Counter(row[0] for row in query(db, "SELECT text FROM memory WHERE speaker = 'user'"))
    assert users == Counter(texts)  # 1,000 user traces, one per message
    [(replies,)] = query(db, "SELECT COUNT(*) FROM memory WHERE speaker = 'assistant'")
    assert replies == len(tg.sent)


# -- 5. the model hangs ------------------------------------------------------------------

# A try that hangs past timeout_s is abandoned and tried once more.
HANGS = "model: {max_retries: 1, timeout_s: 2}\n"


@pytest.mark.timeout(120)
async def test_a_hanging_model_times_out_and_each_message_is_answered_once(
    tmp_path: Path,
) -> None:
    cwd = drill_folder(tmp_path, HANGS)
    db = cwd / "data" / "soulbot.db"
    async with FakeAnthropic() as model:
        env = drill_env(model)
        async with running(cwd, env) as bot:
            model.script_hang(120)  # the first try hangs; the second answers
            await bot.say("a hang, then an answer")
            await bot.wait_reply("a hang, then an answer", within=30)
            assert len(turn_requests(model)) == 2
            model.script(Reply.of_hang(120), Reply.of_hang(120))  # both tries hang
            await bot.say("a hang on every try")
            await bot.wait_event("turn.failed", within=30)
            assert (await bot.wait_replies(2))[1] == prompts.APOLOGY
            await bot.say("are you back?")
            back = await bot.wait_reply("are you back?")
            assert await bot.stop() == 0
        async with running(cwd, env) as again:  # nothing left to answer at the restart
            assert await again.stop() == 0

    replies = bot.replies()
    assert len(replies) == 3 and replies[0].startswith("echo: ") and back == replies[2]
    [failed] = bot.matching("turn.failed")
    assert failed["error_class"] == "APITimeoutError"
    assert len(bot.matching("turn.completed")) == 2
    assert not {"session.error", "shutdown.pending"} & set(bot.names())
    turns = turn_requests(model)
    assert len(turns) == 5  # 2 tries, 2 tries, 1
    assert "a hang on every try" in user_texts(turns[4])  # the apology's message, answered now
    assert again.replies() == [] and not again.matching("sessions.recovered")
    stored = query(db, "SELECT content FROM history WHERE role = 'user' ORDER BY id")
    assert [row[0] for row in stored] == ["a hang, then an answer", "a hang on every try",
                                          "are you back?"]  # fmt: skip
    assert_answered_once(db)


# -- 6. the disk fills up under a reply's write ---------------------------------------------

ROOM = 128 * 2**10  # what the disk has left: enough for a message, a ledger row, a short reply
# One line (the console prints it as one), past that room, and a request the fake takes
# (at most 1 MiB) with it in the history.
LONG_REPLY = " ".join(["a long answer,"] * 36_000)
LONG_ASK = "write me a long answer"
# No compaction: the long reply stays in the history, as it was sent.
ROOMY_HISTORY = "memory: {history_token_budget: 1000000}\n"  # no BIG_PAGES beside it


def long_replies(body: dict[str, Any]) -> Reply | None:
    """LONG_REPLY to a turn whose newest line is LONG_ASK; a short page for a compile."""
    if body["system"][0]["text"] == prompts.COMPILE_SYSTEM:
        return Reply.of_text("- [note] a long answer was given")
    texts = user_texts(body)
    return Reply.of_text(LONG_REPLY) if texts and texts[-1].endswith(LONG_ASK) else None


async def disk_full_reply(bot: Bot, model: FakeAnthropic, db: Path) -> None:
    """A warm-up; the disk fills up; LONG_ASK: its reply is sent and its store
    fails (`history.write_failed`), as does its trace's (tried again)."""
    await bot.say("a warm-up first")
    await bot.wait_reply("a warm-up first")
    model.responder = long_replies
    bot.fill_disk(db.parent, ROOM)
    await bot.say(LONG_ASK)
    assert (await bot.wait_replies(2))[1] == LONG_REPLY
    failed = await bot.wait_event("history.write_failed")
    assert failed["error_class"] == "OperationalError", failed  # SQLite's "disk I/O error"
    await bot.wait_event("memory.write_failed")
    stored = query(db, "SELECT COUNT(*) FROM history WHERE role = 'assistant'")
    assert stored == [(1,)], "the long reply was stored: the disk did not fill up"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("then", ["a next message", "a restart"])
async def test_a_full_disk_under_the_reply_write_answers_once(tmp_path: Path, then: str) -> None:
    cwd = drill_folder(tmp_path, NO_BUDGET + BIG_ANSWERS + ROOMY_HISTORY)
    db = cwd / "data" / "soulbot.db"
    async with FakeAnthropic() as model:
        env = drill_env(model)
        async with running(cwd, env) as bot:
            await disk_full_reply(bot, model, db)
            bot.free_disk()
            if then == "a next message":  # its turn stores the kept reply first
                await bot.say("is it stored now?")
                await bot.wait_reply("is it stored now?")
            assert await bot.stop() == 0  # else the shutdown stores it
        async with running(cwd, env) as again:  # nothing left to answer at the restart
            assert await again.stop() == 0

    assert again.replies() == [], "the long answer's message was answered again"
    assert not again.matching("sessions.recovered")
    assert not {"session.error", "turn.failed", "shutdown.pending"} & set(bot.names())
    rows = query(db, "SELECT content FROM history WHERE role = 'assistant' ORDER BY id")
    expected = [False, True, False] if then == "a next message" else [False, True]
    assert [row[0] == LONG_REPLY for row in rows] == expected
    assert len(bot.replies()) == len(expected)
    assert_answered_once(db)
    # The trace writer tried again once the disk had room: each line is one trace.
    speakers = Counter(row[0] for row in query(db, "SELECT speaker FROM memory "
                                                   "WHERE page IS NULL"))  # fmt: skip
    assert speakers == Counter(user=len(expected), assistant=len(expected))
    [(long_traces,)] = query(db, "SELECT COUNT(*) FROM memory WHERE text = ?", LONG_REPLY)
    assert long_traces == 1
    assert query(db, "PRAGMA integrity_check") == [("ok",)]


# -- 7. SIGKILL between a reply's store and its send -------------------------------------


async def test_a_sigkill_between_storing_a_reply_and_sending_it_sends_it_once(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as tg, FakeAnthropic() as model:
        cwd = drill_folder(
            tmp_path,
            NO_BUDGET + "adapters:\n  console: {enabled: false}\n"
            f"  telegram: {{token: '${{TELEGRAM_TOKEN}}', base_url: '{tg.base_url}',"
            " dm_policy: open}\n",
        )
        db = cwd / "data" / "soulbot.db"
        env = drill_env(model, TELEGRAM_TOKEN=tg.token)
        async with running(cwd, env) as bot:
            tg.hold_next("sendMessage", 60)  # a slow send: the reply is stored, not yet sent
            tg.push_message(42, "are you there?", user_id=42)
            await tg.wait_for(lambda f: f.held == 1, timeout=20, what="the reply's send")
            bot.proc.kill()
            assert await bot.proc.wait() == -signal.SIGKILL
        await tg.wait_for(lambda f: f.held == 0, what="the killed process's hang-up")
        [(stored, delivered)] = query(
            db, "SELECT content, delivered FROM history WHERE role = 'assistant'"
        )
        assert (delivered, tg.sent) == (0, [])  # stored, never delivered
        async with running(cwd, env) as again:
            [sent] = await tg.wait_sent(1, timeout=20)
            await again.wait_event("sessions.reply_sent_late")
            assert await again.stop() == 0
        async with running(cwd, env) as third:  # delivered now: nothing to do at a start
            assert await third.stop() == 0
    assert stored.startswith("echo: ") and sent["text"] == stored
    assert sent["reply_parameters"]["message_id"] == 1  # it answers the message, as it would have
    assert len(tg.sent) == 1  # once
    assert len(turn_requests(model)) == 1  # no second model call
    assert query(db, "SELECT delivered FROM history WHERE role = 'assistant'") == [(1,)]
    assert not third.matching("sessions.recovered")
    assert_answered_once(db)
