"""`/memory` (issue 14): a person lists, drops and exports their own memory, in
a DM only; through the router (the platform is a recorder named "telegram")."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock

from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.commands import MEMORY_MAX_CHARS, MEMORY_PAGES_SHOWN, memory_list
from bot.cluster.wikilock import wiki_lock_path
from bot.memory.page import Page
from bot.memory.service import MemoryView
from bot.memory.store import NewTrace, Trace
from bot.memory.wiki import Wiki
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import make_config, running

OPEN = "adapters: {telegram: {dm_policy: open}}\n"
ANN = "user:telegram:5"
T0 = datetime(2026, 10, 14, 9, 30, tzinfo=UTC).timestamp()


def _trace(text: str, scope: str = ANN, at: float = T0) -> NewTrace:
    return NewTrace("lark", scope, "telegram:5", "user", "Ann", text, at)


async def _wiki_of_ann(runtime: Runtime) -> tuple[Wiki, list[int]]:
    """Ann's wiki as a compile leaves it: two pages, a log, fold records,
    indexed chunks, the watermark at the third trace; a fourth trace waits."""
    store = runtime.memory.store
    ids = await store.add(
        [_trace("my brother Bob lives in Lisbon"), _trace("I like tea"), _trace("Bob plays jazz")]
    )
    wiki = runtime.memory.wiki("lark", ANN)
    assert wiki is not None
    await store.record_folds("lark", ANN, "entities/bob", [ids[0], ids[2]])
    await store.record_folds("lark", ANN, "concepts/notes", [ids[1]])
    bob = replace(Page.new("entities/bob", "Ann's brother, in Lisbon; plays jazz.\n",
                           "2026-10-14T10:00:00Z"), summary="Ann's brother Bob")  # fmt: skip
    notes = Page.new("concepts/notes", "Likes tea.\n", "2026-10-13T10:00:00Z")
    for page in (bob, notes):
        wiki.write_page(page)
        await store.index_page("lark", ANN, page.id, page.body, T0)
    lines = ["my brother Bob lives in Lisbon", "I like tea", "Bob plays jazz"]
    wiki.append_log("2026-10-14", [f"- 09:30 Ann: {line}" for line in lines])
    wiki.write_catalog()
    wiki.update_meta(ids[2])
    [waiting] = await store.add([_trace("new: Bob got a dog", at=T0 + 60)])
    return wiki, [*ids, waiting]


async def test_memory_lists_pages_logs_and_the_latest_notes(tmp_path: Path) -> None:
    async with running(make_config(tmp_path, "http://127.0.0.1:9", OPEN), "telegram") as (
        runtime,
        platform,
    ):
        await platform.say("/memory", user="5")
        [empty] = await platform.replies(1)
        await _wiki_of_ann(runtime)
        await platform.say("/memory", user="5")
        listing = (await platform.replies(2))[-1].text
    assert empty.text == prompts.MEMORY_EMPTY
    assert listing.splitlines() == [
        prompts.MEMORY_HEAD,
        prompts.MEMORY_PAGES.format(count=2),
        "- entities/bob: Ann's brother Bob (2026-10-14)",
        "- concepts/notes: Notes compiled from conversations (2026-10-13)",
        prompts.MEMORY_LOGS.format(count=1, first="2026-10-14", last="2026-10-14"),
        prompts.MEMORY_NOTES.format(count=1),
        "- 2026-10-14 09:31 Ann: new: Bob got a dog",
        prompts.MEMORY_FOOT,
    ]


def test_a_long_list_stays_one_message() -> None:
    pages = tuple(
        replace(Page.new(f"entities/person-{n:02d}", updated=f"2026-10-{n % 28 + 1:02d}"),
                summary="a summary far longer than any list should show " * 5)
        for n in range(40)
    )  # fmt: skip
    notes = tuple(Trace(n, "lark", ANN, "s", "user", "Ann", "word " * 200, T0) for n in range(3))
    text = memory_list(MemoryView(pages, ("2026-10-01", "2026-10-14"), 250, notes))
    lines = text.splitlines()
    assert len(text) <= MEMORY_MAX_CHARS
    assert sum(line.startswith("- entities/") for line in lines) <= MEMORY_PAGES_SHOWN
    assert any(line.startswith("- and ") and "more" in line for line in lines)
    assert prompts.MEMORY_NOTES.format(count=250) in lines
    assert all(len(line) < 200 for line in lines)


async def test_in_a_group_memory_says_it_works_in_a_dm(tmp_path: Path) -> None:
    async with running(make_config(tmp_path, "http://127.0.0.1:9", OPEN), "telegram") as (
        runtime,
        platform,
    ):
        await _wiki_of_ann(runtime)
        for n, words in enumerate(["/memory", "/memory export", "/memory drop entities/bob"]):
            await platform.say(words, user="5", chat="-100", dm=False, message_id=str(n))
        replies = await platform.replies(3)
        wiki = runtime.memory.wiki("lark", ANN)
    assert [r.text for r in replies] == [prompts.MEMORY_DM_ONLY] * 3
    assert all(r.attachment is None for r in replies)
    assert wiki is not None and wiki.read_page("entities/bob") is not None


async def test_drop_takes_the_page_its_traces_log_lines_and_chunks(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url, OPEN), "telegram") as (runtime, platform),
    ):
        wiki, ids = await _wiki_of_ann(runtime)
        store = runtime.memory.store
        await platform.say("/memory drop entities/bob", user="5")
        [done] = await platform.replies(1)
        left = [t.text for t in await store.after("lark", ANN, 0)]
        found = (await store.search("lark", [ANN], ["bob", "jazz", "lisbon"], 10)).ids
        log = (wiki.root / "log" / "2026-10-14.md").read_text()
        catalog = (wiki.root / "index.md").read_text()
        folds = await store.folded_into("lark", ANN, "entities/bob")
        await runtime.memory.compile_one("lark", ANN)  # folds the waiting trace only
    assert done.text == prompts.MEMORY_DROPPED.format(page="entities/bob", traces=2, lines=2)
    assert left == ["I like tea", "new: Bob got a dog"]
    # Only the trace no compile had folded yet is found: it was never in the page.
    assert {i for hits in found.values() for i in hits} == {ids[3]}
    assert log == "# Log 2026-10-14\n\n- 09:30 Ann: I like tea\n"
    assert "entities/bob" not in catalog and "concepts/notes" in catalog
    assert folds == []
    asked = json.dumps(fake.requests)
    assert fake.requests and "Bob got a dog" in asked
    assert "Lisbon" not in asked and "jazz" not in asked  # they never come back


async def test_drop_answers_one_line_for_a_bad_an_absent_or_a_log_id(tmp_path: Path) -> None:
    async with running(make_config(tmp_path, "http://127.0.0.1:9", OPEN), "telegram") as (
        runtime,
        platform,
    ):
        await _wiki_of_ann(runtime)
        asks = ["/memory drop ../secrets", "/memory drop entities/carol",
                "/memory drop log/2026-10-14", "/memory drop", "/memory frobnicate"]  # fmt: skip
        for n, words in enumerate(asks):
            await platform.say(words, user="5", message_id=str(n))
        replies = [r.text for r in await platform.replies(len(asks))]
        kept = await runtime.memory.store.count("lark", ANN)
    assert replies[0].startswith("'../secrets' cannot be a page: ")
    assert len(replies[0].splitlines()) == 1
    assert replies[1] == prompts.MEMORY_NO_PAGE.format(page="entities/carol")
    assert replies[2] == prompts.MEMORY_NOT_LOG.format(page="log/2026-10-14")
    assert replies[3:] == [prompts.MEMORY_USAGE] * 2
    assert kept == 4


async def test_drop_waits_for_no_one_while_another_process_compiles(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9", OPEN)
    async with running(config, "telegram") as (runtime, platform):
        wiki, _ = await _wiki_of_ann(runtime)
        path = wiki_lock_path(config.data_dir, "lark", ANN)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(path, thread_local=False):  # another process's compile, as far as it knows
            await platform.say("/memory drop entities/bob", user="5")
            [busy] = await platform.replies(1)
    assert busy.text == prompts.MEMORY_BUSY
    assert wiki.read_page("entities/bob") is not None


async def test_export_sends_the_wiki_as_one_markdown_file(tmp_path: Path) -> None:
    async with running(make_config(tmp_path, "http://127.0.0.1:9", OPEN), "telegram") as (
        runtime,
        platform,
    ):
        await _wiki_of_ann(runtime)
        await platform.say("/memory export", user="5", message_id="7")
        file_message, line = await platform.replies(2)
    assert file_message.chat_id == "5" and file_message.reply_to == "7"
    assert file_message.text == "" and file_message.attachment is not None
    assert line.text == prompts.MEMORY_EXPORTED.format(pages=2, logs=1, waiting=1)
    attachment = file_message.attachment
    assert attachment.mime == "text/markdown"
    assert attachment.filename.startswith("memory-lark-") and attachment.filename.endswith(".md")
    text = attachment.data.decode()
    order = ["# What Lark keeps about you", "# index.md", "[[entities/bob]]",
             "# concepts/notes.md", "# entities/bob.md", "Ann's brother, in Lisbon",
             "# log/2026-10-14.md", "- 09:30 Ann: I like tea",
             f"# {prompts.EXPORT_PENDING}", "new: Bob got a dog"]  # fmt: skip
    at = [text.index(part) for part in order]
    assert at == sorted(at)


async def test_drop_takes_the_parts_the_compile_moved_out_of_the_page(tmp_path: Path) -> None:
    async with running(make_config(tmp_path, "http://127.0.0.1:9", OPEN), "telegram") as (
        runtime,
        platform,
    ):
        wiki, _ = await _wiki_of_ann(runtime)
        part = Page.new("entities/bob/part-1", "Bob was born in Porto.\n", "2026-10-14T10:00:00Z")
        wiki.write_page(part)
        await runtime.memory.store.index_page("lark", ANN, part.id, part.body, T0)
        await platform.say("/memory drop entities/bob", user="5")
        await platform.replies(1)
        found = await runtime.memory.store.search("lark", [ANN], ["porto"], 10)
    assert not (wiki.root / "entities" / "bob").exists() or not any(
        (wiki.root / "entities" / "bob").iterdir()
    )
    assert found.ids == {"porto": []}
