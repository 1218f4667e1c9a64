"""The compile: traces -> pages -> logs -> catalog -> watermark, and its failures."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

import pytest

from bot.errors import BudgetExceeded
from bot.memory.compile import Compiler, default_clusterer
from bot.memory.store import NewTrace, Trace
from bot.memory.wiki import Wiki
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import capture_logs, make_config, running

DAY = 1_764_400_000.0  # 2025-11-29


def traces(*texts: str, entities: tuple[str, ...] = ()) -> list[NewTrace]:
    return [
        NewTrace("lark", "user:test:a", "test:a", "user", "Ann", text, DAY + i * 60, entities)
        for i, text in enumerate(texts)
    ]


async def test_traces_become_a_page_a_log_a_catalog_line_and_a_watermark(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        store = runtime.memory.store
        ids = await store.add(traces("I moved to Lisbon", "My cat is Miso"))
        ids += await store.add(traces("Bob plays cello", entities=("Bob",)))
        wiki = runtime.memory.wiki("lark", "user:test:a")
        assert wiki is not None
        with capture_logs() as logs:
            result = await runtime.memory.compile_one("lark", "user:test:a")
        assert sorted(result.pages) == ["concepts/notes", "entities/bob"]
        assert result.traces == 3 and result.conflicts == ()
        notes = wiki.read_page("concepts/notes")
        assert notes is not None
        assert notes.summary == "Notes compiled from conversations"
        assert notes.sources == (str(ids[0]), str(ids[1]))
        assert "I moved to Lisbon" in notes.body  # the fake echoes the prompt it got
        assert notes.updated.endswith("Z")
        bob = wiki.read_page("entities/bob")
        assert bob is not None and bob.summary == "Notes on bob compiled from conversations"
        catalog = (wiki.root / "index.md").read_text()
        assert "[[concepts/notes]]" in catalog and "Notes compiled from conversations" in catalog
        log_page = (wiki.root / "log" / "2025-11-29.md").read_text()
        assert "Ann: I moved to Lisbon" in log_page and "Ann: Bob plays cello" in log_page
        assert wiki.watermark() == ids[-1]
        compiled = [e for e in logs if e["event"] == "wiki.compiled"]
        assert compiled[0]["traces_folded"] == 3 and compiled[0]["pages_written"] == 2
        # Nothing new: nothing is written and no model call is made.
        calls = len(fake.requests)
        again = await runtime.memory.compile_one("lark", "user:test:a")
        assert again.traces == 0 and len(fake.requests) == calls


async def test_a_human_edit_and_summary_are_kept(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        await runtime.memory.store.add(traces("first fact"))
        await runtime.memory.compile_one("lark", "user:test:a")
        wiki = runtime.memory.wiki("lark", "user:test:a")
        assert wiki is not None
        path = wiki.root / "concepts" / "notes.md"
        text = path.read_text().replace(
            "summary: Notes compiled from conversations", "summary: What Ann told me"
        )
        path.write_text(text + "\nHUMAN NOTE: Ann prefers tea.\n")
        await runtime.memory.store.add(traces("second fact"))
        await runtime.memory.compile_one("lark", "user:test:a")
        prompt = fake.requests[-1]["messages"][0]["content"][0]["text"]
        assert "HUMAN NOTE: Ann prefers tea." in prompt and "second fact" in prompt
        page = wiki.read_page("concepts/notes")
        assert page is not None and page.summary == "What Ann told me"
        assert "What Ann told me" in (wiki.root / "index.md").read_text()


async def test_a_full_disk_stops_the_compile_and_keeps_the_watermark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        await runtime.memory.store.add(traces("a fact worth keeping"))
        wiki = runtime.memory.wiki("lark", "user:test:a")
        assert wiki is not None

        def full(self: Wiki, page: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as patch, capture_logs() as logs:
            patch.setattr(Wiki, "write_page", full)
            with pytest.raises(OSError):
                await runtime.memory.compile_one("lark", "user:test:a")
        assert wiki.watermark() == 0
        assert [e["error_class"] for e in logs if e["event"] == "wiki.compile_failed"] == [
            "OSError"
        ]
        result = await runtime.memory.compile_one("lark", "user:test:a")
        assert result.traces == 1 and wiki.watermark() > 0


async def test_a_budget_refusal_fails_the_compile(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9", "budget: {daily_tokens_background: 5}\n")
    async with running(config) as (runtime, _):
        await runtime.memory.store.add(traces("a fact"))
        with pytest.raises(BudgetExceeded):
            await runtime.memory.compile_one("lark", "user:test:a")
        wiki = runtime.memory.wiki("lark", "user:test:a")
        assert wiki is not None and wiki.watermark() == 0


async def test_refused_page_ids_are_conflicts_and_the_rest_goes_on(tmp_path: Path) -> None:
    def clusterer(items: Sequence[Trace]) -> dict[str, list[Trace]]:
        return {"../escape": list(items), "concepts/fine": list(items)}

    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        await runtime.memory.store.add(traces("something"))
        compiler = Compiler(runtime.memory.store, runtime.model, clusterer)
        wiki = runtime.memory.wiki("lark", "user:test:a")
        assert wiki is not None
        result = await compiler.compile("lark", "user:test:a", wiki)
        assert result.pages == ("concepts/fine",)
        assert result.conflicts[0].startswith("../escape")
        assert not (tmp_path / "data" / "memory" / "escape.md").exists()


def test_default_clusterer() -> None:
    items = [
        Trace(1, "s", "c", "x", "user", "Ann", "hi", 0.0, ()),
        Trace(2, "s", "c", "x", "user", "Ann", "Zoë and Bob", 0.0, ("Zoë", "Bob")),
    ]
    clusters = default_clusterer(items)
    assert {k: [t.id for t in v] for k, v in clusters.items()} == {
        "concepts/notes": [1],
        "entities/zoe": [2],
        "entities/bob": [2],
    }


async def test_a_path_the_file_system_refuses_is_a_conflict(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        wiki = runtime.memory.wiki("lark", "user:test:a")
        assert wiki is not None
        wiki.root.mkdir(parents=True)
        (wiki.root / "entities").write_text("a file where the folder must be")
        await runtime.memory.store.add(traces("Bob plays cello", entities=("Bob",)))
        await runtime.memory.store.add(traces("and the weather was fine"))
        result = await runtime.memory.compile_one("lark", "user:test:a")
        assert result.pages == ("concepts/notes",)
        assert result.conflicts[0].startswith("entities/bob")
        assert wiki.watermark() > 0  # the compile went on to the end
        assert (wiki.root / "entities").read_text() == "a file where the folder must be"


async def test_a_page_written_before_a_crash_does_not_get_its_traces_again(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        store = runtime.memory.store
        ids = await store.add(traces("I moved to Lisbon"))
        await store.add(traces("Bob plays cello", entities=("Bob",)))
        await runtime.memory.compile_one("lark", "user:test:a")
        wiki = runtime.memory.wiki("lark", "user:test:a")
        assert wiki is not None
        # As if the process died after writing the pages, before moving the watermark.
        meta = wiki.read_meta()
        meta["watermark"] = 0
        wiki.write_meta(meta)
        later = await store.add(traces("I also moved my piano"))
        calls = len(fake.requests)
        result = await runtime.memory.compile_one("lark", "user:test:a")
    assert result.traces == 3 and result.pages == ("concepts/notes",)
    assert len(fake.requests) == calls + 1  # only the page with a new trace
    prompt = str(fake.requests[-1]["messages"])
    assert "I also moved my piano" in prompt.rsplit("New facts", 1)[1]
    assert "I moved to Lisbon" not in prompt.rsplit("New facts", 1)[1]
    notes = wiki.read_page("concepts/notes")
    assert notes is not None and notes.sources == (str(ids[0]), str(later[0]))
    [log_page] = (wiki.root / "log").iterdir()
    text = log_page.read_text()  # the logs were written before the "crash": not again
    assert text.count("I moved to Lisbon") == 1 and text.count("I also moved my piano") == 1
    assert wiki.logged_through() == later[0] == wiki.watermark()
