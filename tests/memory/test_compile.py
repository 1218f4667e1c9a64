"""The compile: traces -> filed on pages -> merged -> logs -> catalog -> watermark,
and a compile that cannot lose a fact whatever the model answers."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot import prompts
from bot.app.runtime import Runtime
from bot.errors import BudgetExceeded
from bot.memory.pagesize import tokens
from bot.memory.store import NewTrace
from bot.memory.wiki import Wiki
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.fakes.librarian import librarian
from tests.kit import capture_logs, make_config, running

DAY = 1_764_400_000.0  # 2025-11-29
SCOPE = "user:test:a"


def traces(*texts: str, name: str = "Ann", entities: tuple[str, ...] = ()) -> list[NewTrace]:
    return [
        NewTrace("lark", SCOPE, "test:a", "user", name, text, DAY + i * 60, entities)
        for i, text in enumerate(texts)
    ]


@asynccontextmanager
async def compiling(
    tmp_path: Path, extra: str = ""
) -> AsyncIterator[tuple[FakeAnthropic, Runtime, Wiki]]:
    """A runtime whose fake model is the librarian, and the wiki of SCOPE."""
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url, extra)) as (rt, _):
        fake.responder = librarian
        wiki = rt.memory.wiki("lark", SCOPE)
        assert wiki is not None
        yield fake, rt, wiki


def merges(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in fake.requests if r["system"][0]["text"] == prompts.COMPILE_SYSTEM]


def filings(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in fake.requests if r.get("tool_choice", {}).get("name") == "file_notes"]


async def test_notes_are_filed_on_pages_logged_catalogued_and_watermarked(tmp_path: Path) -> None:
    async with compiling(tmp_path) as (fake, runtime, wiki):
        store = runtime.memory.store
        ids = await store.add(traces("I moved to Lisbon", "My cat is Miso"))
        ids += await store.add(traces("I play cello", name="Bob"))
        ids += await store.add(traces("Zoë runs a bakery", entities=("Zoë",)))
        with capture_logs() as logs:
            result = await runtime.memory.compile_one("lark", SCOPE)
        assert sorted(result.pages) == ["entities/ann", "entities/bob", "entities/zoe"]
        assert result.traces == 4 and result.conflicts == ()
        [filed] = filings(fake)  # one call for the three notes without entities
        assert "[3] [2025-11-29, Bob] I play cello" in filed["messages"][0]["content"][0]["text"]
        assert "Zoë runs a bakery" not in str(filed)
        ann = wiki.read_page("entities/ann")
        assert ann is not None and ann.summary == "What Ann said"  # the model's summary
        assert "I moved to Lisbon" in ann.body and "My cat is Miso" in ann.body
        assert ann.sources == () and "sources" not in (wiki.root / "entities/ann.md").read_text()
        assert await store.folded_into("lark", SCOPE, "entities/ann") == ids[:2]
        zoe = wiki.read_page("entities/zoe")
        assert zoe is not None and zoe.summary == "Notes on zoe compiled from conversations"
        catalog = (wiki.root / "index.md").read_text()
        assert "- [[entities/ann]]: What Ann said" in catalog
        log_page = (wiki.root / "log" / "2025-11-29.md").read_text()
        assert "Ann: I moved to Lisbon" in log_page and "Bob: I play cello" in log_page
        assert wiki.watermark() == ids[-1]
        [compiled] = [e for e in logs if e["event"] == "wiki.compiled"]
        assert compiled["traces_folded"] == 4 and compiled["pages_written"] == 3
        # The merges ask for the compile's own cap, not the chat reply's.
        assert {r["max_tokens"] for r in merges(fake)} == {4096}
        # Nothing new: nothing is written and no model call is made.
        calls = len(fake.requests)
        again = await runtime.memory.compile_one("lark", SCOPE)
        assert again.traces == 0 and len(fake.requests) == calls


@pytest.mark.parametrize("scope", ["shared", "chat:telegram:g1"])
async def test_a_catalog_other_people_read_holds_no_summary_the_model_wrote(
    tmp_path: Path, scope: str
) -> None:
    """The shared wiki's catalog is in every conversation's prompt, a group's in
    every member's: a page created there is summarised from its id, never in
    words the model took from what someone said. A person's own wiki keeps the
    model's summary (test_notes_are_filed_on_pages_logged_catalogued_and_watermarked)."""
    secret = "Noted: the cat's name is MARMALADE55"

    def summarising(body: dict[str, Any]) -> Reply | None:
        answer = librarian(body)
        if answer is not None and body.get("tool_choice", {}).get("name") == "file_notes":
            assert isinstance(answer.tool_input, dict)
            for page in answer.tool_input["pages"]:
                page["summary"] = secret
        return answer

    async with compiling(tmp_path) as (fake, runtime, _):
        fake.responder = summarising
        wiki = runtime.memory.wiki("lark", scope)
        assert wiki is not None
        said = NewTrace("lark", scope, "telegram:g1", "user", "Mal", "my cat is MARMALADE55", DAY)
        await runtime.memory.store.add([said])
        result = await runtime.memory.compile_one("lark", scope)
        assert result.pages == ("entities/mal",)
        page = wiki.read_page("entities/mal")
        assert page is not None and page.summary == "Notes on mal compiled from conversations"
        assert "MARMALADE55" in page.body  # the fact is kept, on its page
        catalog = (wiki.root / "index.md").read_text()
        assert "- [[entities/mal]]: Notes on mal compiled from conversations" in catalog
        assert "MARMALADE55" not in catalog
        soul = runtime.registry.get("lark")
        assert soul is not None and "MARMALADE55" not in soul.wiki_index


async def test_a_human_edit_and_summary_are_kept(tmp_path: Path) -> None:
    async with compiling(tmp_path) as (fake, runtime, wiki):
        await runtime.memory.store.add(traces("first fact"))
        await runtime.memory.compile_one("lark", SCOPE)
        path = wiki.root / "entities" / "ann.md"
        text = path.read_text().replace("summary: What Ann said", "summary: My friend Ann")
        path.write_text(text + "\nHUMAN NOTE: Ann prefers tea.\n")
        await runtime.memory.store.add(traces("second fact"))
        await runtime.memory.compile_one("lark", SCOPE)
        prompt = merges(fake)[-1]["messages"][0]["content"][0]["text"]
        assert "HUMAN NOTE: Ann prefers tea." in prompt and "second fact" in prompt
        assert "My friend Ann" in filings(fake)[-1]["messages"][0]["content"][0]["text"]
        page = wiki.read_page("entities/ann")
        assert page is not None and page.summary == "My friend Ann"
        assert "My friend Ann" in (wiki.root / "index.md").read_text()


@pytest.mark.parametrize(
    ("answer", "conflict"),
    [
        ({"pages": [{"id": "../escape", "notes": [1]}, {"id": "log/2025-11-29", "notes": [2]}]},
         "not a page id to file on"),
        ({"pages": [{"id": "entities/ann", "notes": [1]}]}, "1 notes were filed on no page"),
        ({"pages": "everything on one page"}, "the model filed no notes"),
    ],
)  # fmt: skip
async def test_a_wrong_filing_answer_puts_the_notes_on_the_default_page(
    tmp_path: Path, answer: dict[str, Any], conflict: str
) -> None:
    async with compiling(tmp_path) as (fake, runtime, wiki):
        await runtime.memory.store.add(traces("a first thing", "a second thing"))
        fake.script(Reply.of_tool_use("file_notes", answer))
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert any(conflict in c for c in result.conflicts), result.conflicts
        notes = wiki.read_page("concepts/notes")
        assert notes is not None and "a second thing" in notes.body
        everything = "".join(p.body for p in wiki.list_pages() if not p.id.startswith("log/"))
        assert "a first thing" in everything  # no note is left out of the wiki
        assert not (tmp_path / "data" / "memory" / "escape.md").exists()
        assert wiki.read_page("log/2025-11-29") is not None


async def test_new_page_ids_are_made_page_names(tmp_path: Path) -> None:
    async with compiling(tmp_path) as (fake, runtime, wiki):
        await runtime.memory.store.add(traces("Ann's sister is called Zoë", "张伟 is my teacher"))
        fake.script(Reply.of_tool_use("file_notes", {"pages": [
            {"id": "entities/Zoë Ünal", "summary": "Ann's\nsister", "notes": [1]},
            {"id": "entities/张伟", "summary": "A teacher", "notes": [2]},
        ]}))  # fmt: skip
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert sorted(result.pages) == ["entities/zoe-unal", "entities/张伟"]
        page = wiki.read_page("entities/zoe-unal")
        assert page is not None and page.summary == "Ann's sister"


@pytest.mark.parametrize("stop", ["max_tokens", "refusal"])
async def test_a_merge_that_stops_short_keeps_the_page_and_its_notes_wait(
    tmp_path: Path, stop: str
) -> None:
    extra = "memory: {page_max_tokens: 100000}\n"
    async with compiling(tmp_path, extra) as (fake, runtime, wiki):
        store = runtime.memory.store
        facts = [f"fact number {n} is that the sky was {n} shades of blue" for n in range(120)]
        await store.add(traces(*facts[:10]))
        await runtime.memory.compile_one("lark", SCOPE)
        before = (wiki.root / "entities" / "ann.md").read_text()
        late = await store.add(traces(*facts[10:]))
        filed = {"pages": [{"id": "entities/ann", "notes": list(range(1, 41))}]}
        # A page of 120 facts, each with a long story: past memory.compile.max_tokens (4,096).
        cut = "\n".join(f"- {f}: " + "and then it went on " * 8 for f in facts)
        answer = Reply.of_text(cut) if stop == "max_tokens" else Reply.of_text("No.", stop)
        fake.script(*(Reply.of_tool_use("file_notes", filed) for _ in range(3)), answer)
        with capture_logs() as logs:
            result = await runtime.memory.compile_one("lark", SCOPE)
        assert (wiki.root / "entities" / "ann.md").read_text() == before
        assert any(f"stopped early ({stop})" in c for c in result.conflicts), result.conflicts
        assert result.waiting == 110 and wiki.pending() == {"entities/ann": late}
        assert wiki.watermark() == late[-1]
        assert [e["waiting"] for e in logs if e["event"] == "wiki.compiled"] == [110]
        # The next compile takes them up, and the page gets every fact.
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert result.pages == ("entities/ann",) and result.waiting == 0
        page = wiki.read_page("entities/ann")
        assert page is not None and all(f in page.body for f in facts)
        assert wiki.pending() == {}


async def test_a_broken_page_gets_its_notes_once_it_is_fixed(tmp_path: Path) -> None:
    async with compiling(tmp_path) as (_fake, runtime, wiki):
        store = runtime.memory.store
        await store.add(traces("I moved to Lisbon"))
        await runtime.memory.compile_one("lark", SCOPE)
        path = wiki.root / "entities" / "ann.md"
        good = path.read_text()
        path.write_text(good.replace("summary:", "summary: [unclosed"))
        waiting = await store.add(traces("I adopted a greyhound"))
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert result.pages == () and result.conflicts[0].startswith("entities/ann: ")
        assert wiki.pending() == {"entities/ann": waiting}
        assert ("lark", SCOPE) in await runtime.memory.pending_wikis()
        path.write_text(good)  # the editor fixes it
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert result.pages == ("entities/ann",) and result.traces == 1
        page = wiki.read_page("entities/ann")
        assert page is not None and "I adopted a greyhound" in page.body
        assert await runtime.memory.pending_wikis() == []


async def test_a_full_disk_stops_the_compile_and_keeps_the_watermark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with compiling(tmp_path) as (_fake, runtime, wiki):
        await runtime.memory.store.add(traces("a fact worth keeping"))

        def full(self: Wiki, page: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as patch, capture_logs() as logs:
            patch.setattr(Wiki, "write_page", full)
            with pytest.raises(OSError):
                await runtime.memory.compile_one("lark", SCOPE)
        assert wiki.watermark() == 0
        assert [e["error_class"] for e in logs if e["event"] == "wiki.compile_failed"] == [
            "OSError"
        ]
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert result.traces == 1 and wiki.watermark() > 0


async def test_a_budget_refusal_fails_the_compile(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9", "budget: {daily_tokens_background: 5}\n")
    async with running(config) as (runtime, _):
        await runtime.memory.store.add(traces("a fact"))
        with pytest.raises(BudgetExceeded):
            await runtime.memory.compile_one("lark", SCOPE)
        wiki = runtime.memory.wiki("lark", SCOPE)
        assert wiki is not None and wiki.watermark() == 0


async def test_a_path_the_file_system_refuses_is_a_conflict_and_its_notes_wait(
    tmp_path: Path,
) -> None:
    async with compiling(tmp_path) as (fake, runtime, wiki):
        wiki.root.mkdir(parents=True)
        (wiki.root / "entities").write_text("a file where the folder must be")
        bob = await runtime.memory.store.add(traces("Bob plays cello", entities=("Bob",)))
        await runtime.memory.store.add(traces("and the weather was fine"))
        fake.script(Reply.of_tool_use("file_notes", {"pages": [{"id": "concepts/weather",
                                                                 "notes": [1]}]}))  # fmt: skip
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert result.pages == ("concepts/weather",)
        assert result.conflicts[0].startswith("entities/bob")
        assert wiki.pending() == {"entities/bob": bob}
        assert (wiki.root / "entities").read_text() == "a file where the folder must be"


async def test_a_page_written_before_a_crash_does_not_get_its_traces_again(
    tmp_path: Path,
) -> None:
    async with compiling(tmp_path) as (fake, runtime, wiki):
        store = runtime.memory.store
        ids = await store.add(traces("I moved to Lisbon"))
        await store.add(traces("I play cello", name="Bob"))
        await runtime.memory.compile_one("lark", SCOPE)
        # As if the process died after writing the pages, before moving the watermark.
        meta = wiki.read_meta()
        meta["watermark"] = 0
        wiki.write_meta(meta)
        later = await store.add(traces("I also moved my piano"))
        calls = len(merges(fake))
        result = await runtime.memory.compile_one("lark", SCOPE)
        assert result.traces == 3 and result.pages == ("entities/ann",)
        assert len(merges(fake)) == calls + 1  # only the page with a new trace
        prompt = str(merges(fake)[-1]["messages"]).rsplit("New facts", 1)[1]
        assert "I also moved my piano" in prompt and "I moved to Lisbon" not in prompt
        assert await store.folded_into("lark", SCOPE, "entities/ann") == [ids[0], later[0]]
        [log_page] = (wiki.root / "log").iterdir()
        text = log_page.read_text()  # the logs were written before the "crash": not again
        assert text.count("I moved to Lisbon") == 1 and text.count("I also moved my piano") == 1
        assert wiki.logged_through() == later[0] == wiki.watermark()


async def test_a_page_from_before_fold_records_moves_its_sources_to_the_store(
    tmp_path: Path,
) -> None:
    async with compiling(tmp_path) as (fake, runtime, wiki):
        store = runtime.memory.store
        old = await store.add(traces("I moved to Lisbon"))
        wiki.root.joinpath("entities").mkdir(parents=True)
        wiki.root.joinpath("entities", "ann.md").write_text(
            f"---\nid: entities/ann\nsummary: Ann\nsources: ['{old[0]}', '7', 'x']\n---\n"
            "- Lisbon\n"  # '7' names no trace of this scope: a hand-edited list
        )
        new = await store.add(traces("I adopted a greyhound"))
        await runtime.memory.compile_one("lark", SCOPE)
        prompt = str(merges(fake)[-1]["messages"]).rsplit("New facts", 1)[1]
        assert "greyhound" in prompt and "Lisbon" not in prompt
        assert "sources" not in wiki.root.joinpath("entities", "ann.md").read_text()
        assert await store.folded_into("lark", SCOPE, "entities/ann") == [old[0], new[0]]


async def test_a_page_over_its_cap_moves_its_oldest_paragraphs_to_parts(tmp_path: Path) -> None:
    async with compiling(tmp_path, "memory: {page_max_tokens: 200}\n") as (fake, runtime, wiki):
        facts = [f"Ann said thing {n:03d}, which is worth remembering" for n in range(60)]
        for day in range(6):  # six compiles of ten notes each
            await runtime.memory.store.add(traces(*facts[day * 10 : day * 10 + 10]))
            await runtime.memory.compile_one("lark", SCOPE)
        pages = {p.id: p for p in wiki.list_pages() if p.id.startswith("entities/ann")}
        assert len(pages) > 2 and all(tokens(p.body) <= 200 for p in pages.values())
        ann = pages.pop("entities/ann")
        chain, page = [], ann  # the page links its newest part, each part the one before
        while page.links:
            [target] = page.links
            chain.append(target)
            page = pages[target]
        assert sorted(chain) == sorted(pages)
        catalog = (wiki.root / "index.md").read_text()
        newest = f"entities/ann/part-{len(pages)}"
        assert f"- [[{newest}]]: earlier notes of entities/ann, in {len(pages)} parts" in catalog
        assert catalog.count("/part-") == 1
        assert {p.summary for p in pages.values()} == {"Earlier notes of entities/ann"}
        text = "\n".join(p.body for p in [*pages.values(), ann])
        assert all(text.count(f) == 1 for f in facts)  # every fact, once
        # The newest facts stay on the page the notes keep going to.
        assert facts[-1] in ann.body and facts[0] not in ann.body
        last_merge = merges(fake)[-1]["messages"][0]["content"][0]["text"]
        assert tokens(last_merge) < 200 + 10 * 30 + 150


async def test_the_catalog_lists_the_logs_on_one_line(tmp_path: Path) -> None:
    async with compiling(tmp_path) as (_fake, runtime, wiki):
        for day in range(9):
            trace = NewTrace(
                "lark", SCOPE, "test:a", "user", "Ann", f"day {day}", DAY + day * 86400
            )
            await runtime.memory.store.add([trace])
            await runtime.memory.compile_one("lark", SCOPE)
        catalog = (wiki.root / "index.md").read_text()
        logs = catalog.split("## Logs\n\n", 1)[1].strip().splitlines()
        assert logs == ["- [[log/2025-12-07]]: the newest of 9 daily logs (since 2025-11-29)"]
