"""Ambient mode's labelled set (bench/data/ambient/) and its benchmark's output."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from bench.ambient import DATA, KINDS, SPLITS, load
from tests.bench.test_data_sets import bench


def test_the_labelled_set_has_its_shape_and_counts() -> None:
    header = json.loads(DATA.read_text(encoding="utf-8").splitlines()[0])
    assert "SYNTHETIC" in header["about"]  # says plainly how it was made
    conversations = load(DATA)
    moments: Counter[tuple[str, str]] = Counter()
    speak: Counter[str] = Counter()
    for conversation in conversations:
        persona = conversation["persona"]
        assert persona["name"] and persona["id"] and persona["role"]
        last = -1.0
        for message in conversation["messages"]:
            assert message["text"].strip() and message["ts"] >= last
            last = message["ts"]
            if message.get("own"):
                assert message["speaker"] == persona["id"]
                continue
            assert isinstance(message["speak"], bool)
            moments[conversation["kind"], conversation["split"]] += 1
            speak[conversation["split"]] += message["speak"]
    assert sum(moments.values()) >= 300
    assert {kind for kind, _ in moments} == set(KINDS)  # hobby, support, friends
    assert all(moments[kind, split] >= 40 for kind in KINDS for split in SPLITS)
    assert all(speak[split] >= 20 for split in SPLITS)  # enough "speak" to measure recall
    ids = [c["id"] for c in conversations]
    assert len(ids) == len(set(ids))
    held = {c["persona"]["id"] for c in conversations if c["split"] == "held_out"}
    assert held.isdisjoint(c["persona"]["id"] for c in conversations if c["split"] == "tune")


def test_without_a_model_the_model_stage_says_it_is_not_measured(tmp_path: Path) -> None:
    rows = DATA.read_text(encoding="utf-8").splitlines()
    tiny = tmp_path / "tiny.jsonl"
    tune = next(r for r in rows[1:] if json.loads(r)["split"] == "tune")
    held = next(r for r in rows[1:] if json.loads(r)["split"] == "held_out")
    tiny.write_text("\n".join([rows[0], tune, held]) + "\n")

    done = bench("bench/ambient.py", "--data", str(tiny))

    assert done.returncode in (0, 1), done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["split"] for line in lines] == ["tune", "held_out"]
    for line in lines:
        stage = line["model_stage"]
        assert stage["measured"] is False and stage["precision"] is stage["recall"] is None
        assert stage["note"].startswith("not measured")
        calls = line["scorer"]["gate_calls_per_100"]
        assert stage["gate_calls_per_100"] == calls and (stage["tokens_per_100"] > 0) == (calls > 0)
