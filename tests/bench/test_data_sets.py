"""The benchmarks that need a data set or a server run on a fresh clone, which
has neither: what is missing is one line on stderr, and the data sets that are
there still print their JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Two dated sessions between two friends, in the LoCoMo layout bench/recall.py reads.
CONVERSATION = {
    "speaker_a": "Ann",
    "speaker_b": "Bob",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat called Pepper."},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! My sister lives in Lisbon."},
    ],
    "session_2_date_time": "9:10 am on 2 June, 2023",
    "session_2": [
        {"speaker": "Ann", "dia_id": "D2:1", "text": "Pepper learned to open the fridge."},
        {"speaker": "Bob", "dia_id": "D2:2", "text": "I started rowing on Sundays."},
    ],
    "qa": [
        {"question": "What is the name of Ann's cat?", "evidence": ["D1:1"], "category": 1},
        {"question": "Where does Bob's sister live?", "evidence": ["D1:2"], "category": 4},
        {"question": "What did Bob start doing?", "evidence": ["D2:2"], "category": 2},
        {"question": "What did Ann say about dogs?", "evidence": [], "category": 5},
    ],
}


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=50
    )


def test_the_recall_bench_skips_a_missing_set_and_runs_the_others(tmp_path: Path) -> None:
    missing, tiny = tmp_path / "locomo", tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "one.json").write_text(json.dumps(CONVERSATION))

    done = bench("bench/recall.py", "--data", str(missing), "--data", str(tiny))

    assert done.returncode in (0, 1), done.stderr  # 1: a missed target, not a crash
    assert done.stderr.splitlines() == [
        f"recall: {missing} skipped: no conversation (*.json) there"
        " (docs/performance.md says where to get the data sets)"
    ]
    [line] = done.stdout.splitlines()
    figures = json.loads(line)
    assert (figures["data"], figures["conversations"], figures["questions"]) == ("tiny", 1, 3)


def test_the_recall_bench_with_no_set_at_all_says_so_and_exits_0(tmp_path: Path) -> None:
    done = bench("bench/recall.py", "--data", str(tmp_path / "a"), "--data", str(tmp_path / "b"))

    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert [line.split(" skipped:")[0] for line in done.stderr.splitlines()] == [
        f"recall: {tmp_path / 'a'}",
        f"recall: {tmp_path / 'b'}",
    ]


def test_the_months_bench_skips_a_missing_conversation(tmp_path: Path) -> None:
    done = bench("bench/memory_months.py", "--data", str(tmp_path / "26.json"))

    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"memory_months: skipped: no conversation at {tmp_path / '26.json'}")


def test_the_scale_bench_skips_without_a_postgresql_server() -> None:
    done = bench("bench/scale.py", "--store", "postgresql://nobody@127.0.0.1:1/none")

    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("scale: skipped: no PostgreSQL to run on (")
