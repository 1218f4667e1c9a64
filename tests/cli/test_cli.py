"""The `soulbot` command as a user runs it: a subprocess, real files."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot import __version__
from bot.storage.db import open_conn
from tests.kit import example_souls
from tests.run_cli import soulbot

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "soulbot.example.yaml"
BROKEN = "---\nname: Broken\nhexaco:\n  openness: high\n---\nBody"


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the example config and the committed example souls in tmp_path (run
    from there)."""
    example_souls(tmp_path)
    shutil.copy(EXAMPLE, tmp_path / "soulbot.yaml")
    return tmp_path


def test_version_and_help() -> None:
    assert soulbot("--version").stdout.strip() == f"soulbot, version {__version__}"
    for command in ("run", "chat", "check", "prompt", "init", "usage", "soul rollback"):
        result = soulbot(*command.split(), "--help")
        assert result.returncode == 0, result.stderr
        assert "--config" in result.stdout


def test_check_the_example_config(example: Path) -> None:
    result = soulbot("check", "--config", "soulbot.yaml", cwd=example)
    assert result.returncode == 0, result.stdout + result.stderr
    header, *rows = result.stdout.splitlines()[:3]
    assert header.split() == ["ID", "NAME", "FILES", "PROMPT", "TOKENS"]
    assert [row.split()[:3] for row in rows] == [
        ["twinkle", "Twinkle", "SOUL.md"], ["wren", "Wren", "SOUL.md"],
    ]  # fmt: skip
    assert all("memory/index.md" in row and int(row.split()[-1]) > 100 for row in rows)
    assert "2 soul(s) loaded, no errors" in result.stdout


def test_check_in_the_repo_as_the_readme_says(tmp_path: Path) -> None:
    """The README's command from a repo root after the first run (the example
    souls copied into workspaces/; the live one may hold a person's own souls)."""
    example_souls(tmp_path)
    (tmp_path / "deploy").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "deploy" / "soulbot.example.yaml")
    result = soulbot("check", "--config", "deploy/soulbot.example.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "wren" in result.stdout


def test_a_broken_soul_next_to_a_good_one(example: Path) -> None:
    broken = example / "workspaces" / "broken"
    broken.mkdir()
    (broken / "SOUL.md").write_text(BROKEN)
    result = soulbot("check", cwd=example)
    assert result.returncode == 1
    assert "wren" in result.stdout.split("errors:")[0]
    errors = result.stdout.split("errors:")[1]
    assert (
        "workspaces/broken/SOUL.md: hexaco.openness: expected a number in [0, 1], got 'high'"
        in errors
    )
    logged = [json.loads(line) for line in result.stderr.splitlines()]
    failed = [e for e in logged if e["event"] == "soul.load_failed"]
    assert len(failed) == 1 and failed[0]["path"].endswith("workspaces/broken")


def test_check_reports_a_binding_to_an_unknown_soul(example: Path) -> None:
    config = example / "soulbot.yaml"
    config.write_text(
        config.read_text().replace("bindings: []", "bindings: [{platform: telegram, soul: ghost}]")
    )
    result = soulbot("check", cwd=example)
    assert result.returncode == 1
    assert (
        "bindings[0].soul: no soul with id 'ghost' is loaded (loaded: twinkle, wren)"
        in result.stdout
    )


def test_a_bad_config_names_the_key_and_hides_the_secret(example: Path) -> None:
    config = example / "soulbot.yaml"
    text = config.read_text().replace("dm_policy: pairing", "dm_policy: anyone")
    config.write_text(text.replace("${TELEGRAM_TOKEN:-}", "${TELEGRAM_TOKEN}"))
    secret = "123456:ABC-very-secret-token"
    result = soulbot("check", cwd=example, env={"TELEGRAM_TOKEN": secret})
    assert result.returncode == 1
    assert (
        "soulbot.yaml: adapters.telegram.dm_policy: expected one of open, allowlist, pairing, "
        "got 'anyone'" in result.stderr
    )
    assert "adapters.discord.dm_policy" in result.stderr
    assert secret not in result.stdout + result.stderr


def test_an_explicit_config_that_does_not_exist(tmp_path: Path) -> None:
    result = soulbot("check", "--config", "nope.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert "nope.yaml: config file not found" in result.stderr


def test_prompt_prints_blocks_in_order(example: Path) -> None:
    result = soulbot("prompt", "wren", "--config", "soulbot.yaml", cwd=example)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    separators = [line for line in out.splitlines() if line.startswith("────────")]
    kinds = [line.split(": ")[1].split()[0] for line in separators]
    assert kinds == ["soul", "style", "memory_index", "traits", "hard_limits", "mood"]
    assert out.index("## Style") > out.index("You are Wren")
    assert out.index("## Mood") > out.index("as if they were professional advice")
    assert "block 6/6: mood (the default; per conversation, after the soul's cached" in out
    assert "Your mood in this conversation: warm." in out
    assert "(warm, playful, thoughtful, focused) with the set_mood tool" in out


def test_prompt_shows_a_conversations_mood(example: Path) -> None:
    """With --session, the mood that conversation moved to, read from the store;
    a session that never moved (or moved under another soul) has the default."""
    (example / "data").mkdir()
    with contextlib.closing(open_conn(example / "data" / "soulbot.db")) as conn:
        conn.execute("INSERT INTO session_moods (session, soul, mood, ts) VALUES "
                     "('telegram:42', 'wren', 'playful', 1.0), "
                     "('telegram:7', 'twinkle', 'playful', 1.0)")  # fmt: skip
    moved = soulbot("prompt", "wren", "--session", "telegram:42", cwd=example)
    assert moved.returncode == 0, moved.stderr
    assert "block 6/6: mood (this conversation's;" in moved.stdout
    assert "Your mood in this conversation: playful." in moved.stdout
    other = soulbot("prompt", "wren", "--session", "telegram:7", cwd=example)
    assert "Your mood in this conversation: warm." in other.stdout


def test_prompt_of_an_unknown_soul(example: Path) -> None:
    result = soulbot("prompt", "nobody", cwd=example)
    assert result.returncode == 1
    assert "no soul with id 'nobody' is loaded (loaded: twinkle, wren)" in result.stderr


def test_init_then_check(tmp_path: Path) -> None:
    (tmp_path / "workspaces").mkdir()
    result = soulbot("init", "luna", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "workspaces" / "luna" / "SOUL.md").is_file()
    check = soulbot("check", cwd=tmp_path)  # luna and the example souls: which one answers?
    assert check.returncode == 1
    assert check.stdout.endswith(
        "errors:\n  - default_soul: set it to one of the loaded souls (luna, twinkle, wren)\n"
    )
    (tmp_path / "soulbot.yaml").write_text("default_soul: luna\n")
    check = soulbot("check", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.splitlines()[1].split()[:2] == ["luna", "luna"]
    again = soulbot("init", "luna", cwd=tmp_path)
    assert again.returncode == 1
    assert "already exists" in again.stderr


def test_init_from_a_legacy_json_persona(tmp_path: Path) -> None:
    (tmp_path / "workspaces").mkdir()
    legacy = {
        "id": "old-bot",
        "name": "Old",
        "baseSystemPrompt": "You are Old.",
        "personalityTraits": {"honesty": 0.7},
    }
    (tmp_path / "p.json").write_text(json.dumps(legacy))
    result = soulbot("init", "old", "--from-json", "p.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    prompt = soulbot("prompt", "old-bot", cwd=tmp_path)
    assert prompt.stdout.splitlines()[1] == "You are Old."
    assert "honesty-humility 0.70" in prompt.stdout
    (tmp_path / "bad.json").write_text(
        json.dumps({"name": "B", "personalityTraits": {"openness": 3}})
    )
    bad = soulbot("init", "bad", "--from-json", "bad.json", cwd=tmp_path)
    assert bad.returncode == 1
    assert "bad.json: hexaco.openness: expected a number in [0, 1], got 3" in bad.stderr


def test_console_log_format(example: Path) -> None:
    soul_md = example / "workspaces" / "twinkle" / "SOUL.md"
    soul_md.write_text(soul_md.read_text().replace("---\n", "---\ncolour: red\n", 1))
    result = soulbot("check", "--log-format", "console", cwd=example)
    assert result.returncode == 0
    assert "soul.warning" in result.stderr  # check shows warnings, not info, in a console
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stderr.splitlines()[0])


def test_chat_and_usage_against_the_fake_model(example: Path) -> None:
    from tests.fakes.process import FakeProcess

    with FakeProcess() as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "k"}
        result = subprocess.run(
            [sys.executable, "-m", "bot", "chat", "wren"],
            cwd=example, input="hello wren\n/reset\nstill there?\n/quit\nnever sent\n",
            env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        sent = [r for r in fake.requests() if "wiki" not in r["system"][0]["text"]]
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("Wren> ")]
    assert lines[0] == "Wren> echo: " + sent[0]["messages"][0]["content"][0]["text"]
    assert "Started a new conversation" in lines[1]
    assert len(sent) == 2
    assert all("never sent" not in json.dumps(r) for r in sent)
    assert "hello wren" not in json.dumps(sent[1])  # /reset cleared the history
    report = soulbot("usage", "--by", "source", cwd=example)
    assert report.returncode == 0
    rows = {
        line.split()[0]: line.split() for line in report.stdout.splitlines()[2:] if line.strip()
    }
    assert rows["turn"][1] == "2"
    # The shutdown compile filed the chat's notes and merged their page.
    assert rows["compile"][1] == "2"
    assert rows["TOTAL"][1] == "4"


def test_chat_needs_credentials_and_a_known_soul(example: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    result = subprocess.run(
        [sys.executable, "-m", "bot", "chat"], cwd=example, env=env, input="",
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY" in result.stderr
    unknown = soulbot("chat", "nobody", cwd=example, env={"ANTHROPIC_API_KEY": "k"})
    assert unknown.returncode == 1
    assert "no soul with id 'nobody'" in unknown.stderr


def test_usage_with_no_ledger_yet(tmp_path: Path) -> None:
    result = soulbot("usage", cwd=tmp_path)
    assert result.returncode == 0
    assert "No usage recorded yet" in result.stdout


# Eight soulbot processes in a row: 30 s alone, twice that on a busy machine.
@pytest.mark.timeout(180)
def test_memory_import_recall_compile_pages_and_forget(example: Path) -> None:
    from tests.fakes.process import FakeProcess

    rows = [
        {"text": "I adopted a greyhound named Pepper", "speaker": "user", "name": "Ann",
         "created_at": "2026-10-14T09:30:00Z"},
        {"text": "Pepper sounds lovely", "speaker": "assistant", "name": "Wren",
         "created_at": 1760434300},
    ]  # fmt: skip
    (example / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    scope = "user:telegram:42"
    imported = soulbot("memory", "import", "wren", "t.jsonl", "--scope", scope, cwd=example)
    assert imported.returncode == 0, imported.stderr
    assert "imported 2 traces" in imported.stdout
    recalled = soulbot("memory", "recall", "wren", "tell me about my greyhound", "--scope", scope,
                       cwd=example)  # fmt: skip
    assert "[user, " in recalled.stdout and "2026-10-14] I adopted a greyhound named Pepper" in (
        recalled.stdout
    )
    other = soulbot("memory", "recall", "wren", "greyhound", "--scope", "user:telegram:7",
                    cwd=example)  # fmt: skip
    assert "Pepper" not in other.stdout
    with FakeProcess() as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "k"}
        compiled = soulbot("compile", "wren", cwd=example, env=env)
    assert compiled.returncode == 0, compiled.stderr
    assert scope in compiled.stdout and "ok" in compiled.stdout
    pages = soulbot("memory", "pages", "wren", "--scope", scope, cwd=example)
    # The plain fake files no notes, so they all go to the default page.
    assert "concepts/notes  [concept]  Notes compiled from conversations" in pages.stdout
    wiki = example / "data" / "memory" / "wren" / "user" / "telegram" / "42"
    assert "[[concepts/notes]]" in (wiki / "index.md").read_text()
    forgot = soulbot("memory", "forget", "wren", "--scope", scope, "--yes", cwd=example)
    assert forgot.returncode == 0, forgot.stderr
    assert not wiki.exists()
    after = soulbot("memory", "recall", "wren", "greyhound Pepper", "--scope", scope, cwd=example)
    assert "Pepper" not in after.stdout


@pytest.mark.parametrize("instance", [None, "b"])
def test_memory_forget_beside_a_serving_daemon_is_refused_and_erases_nothing(
    example: Path, instance: str | None
) -> None:
    from bot.app.owner import own_data_dir

    (example / "t.jsonl").write_text(
        '{"text": "I adopted a greyhound named Pepper", "created_at": 1}\n'
    )
    scope = "user:telegram:42"
    imported = soulbot("memory", "import", "wren", "t.jsonl", "--scope", scope, cwd=example)
    assert imported.returncode == 0, imported.stderr
    where = "data" if instance is None else f"data (instance {instance})"
    with own_data_dir(example / "data", instance):  # a daemon serving, of any instance
        forgot = soulbot("memory", "forget", "wren", "--scope", scope, "--yes", cwd=example)
    assert forgot.returncode == 1
    assert forgot.stderr.splitlines() == [
        f"error: soulbot (pid {os.getpid()}) serves {where}: forget from the chat with "
        "`/forget confirm`, or stop the daemon first; nothing was erased"
    ]
    kept = soulbot("memory", "recall", "wren", "greyhound", "--scope", scope, cwd=example)
    assert "Pepper" in kept.stdout


def test_memory_import_names_the_bad_line(example: Path) -> None:
    (example / "bad.jsonl").write_text('{"text": "ok", "created_at": 1}\n{"text": 5}\n')
    result = soulbot("memory", "import", "wren", "bad.jsonl", "--scope", "shared", cwd=example)
    assert result.returncode == 1
    assert "bad.jsonl line 2: expected an object with a text string" in result.stderr
    scope = soulbot("memory", "pages", "wren", "--scope", "user:x", cwd=example)
    assert scope.returncode == 1 and "--scope" in scope.stderr


@pytest.mark.parametrize(
    "scope",
    ["user:x:..", "user:x:.", "chat:x:a/b", "user:X:1", "user:x:", "members:x:9", "member:x:9"],
)
def test_a_scope_that_names_no_single_wiki_is_refused(example: Path, scope: str) -> None:
    others = example / "data" / "memory" / "wren" / "user" / "x" / "7"
    others.mkdir(parents=True)
    (others / "index.md").write_text("# Memory Index\n")
    result = soulbot("memory", "forget", "wren", "--scope", scope, "--yes", cwd=example)
    assert result.returncode == 1 and "--scope: expected shared" in result.stderr
    assert (others / "index.md").exists()  # "user:x:.." once meant every wiki of user/x/


def test_soul_rollback_and_epoch(example: Path) -> None:
    soul_md = example / "workspaces" / "twinkle" / "SOUL.md"
    original = soul_md.read_text()
    backups = example / "workspaces" / "twinkle" / "memory" / ".meta" / "backups"
    backups.mkdir(parents=True)
    (backups / "SOUL.md.2026-11-01").write_text(original)
    soul_md.write_text(original.replace("(Empty at first", "- [2026-11-02 10:00] Met Ann.\n(Empty"))
    epoch = soulbot("soul", "epoch", "twinkle", cwd=example)
    assert epoch.returncode == 0, epoch.stderr
    assert epoch.stdout.startswith("twinkle: epoch 1 started; the autobiography is empty")
    assert "Met Ann" not in soul_md.read_text() and "- epoch: 1" in soul_md.read_text()
    rolled = soulbot("soul", "rollback", "twinkle", "2026-11-01", cwd=example)
    assert rolled.returncode == 0, rolled.stderr
    assert soul_md.read_text() == original
    missing = soulbot("soul", "rollback", "twinkle", "1999-12-31", cwd=example)
    assert missing.returncode == 1 and "no backup of" in missing.stderr
    plain = soulbot("soul", "epoch", "wren", cwd=example)
    assert plain.returncode == 1 and "wren: SOUL.md has no regions" in plain.stderr


def test_soul_rollback_and_epoch_beside_a_serving_daemon_are_refused(example: Path) -> None:
    """Its live sessions would keep the old prompt: the chat's commands do it
    inside the daemon."""
    from bot.app.owner import own_data_dir

    soul_md = example / "workspaces" / "twinkle" / "SOUL.md"
    original = soul_md.read_text()
    backups = example / "workspaces" / "twinkle" / "memory" / ".meta" / "backups"
    backups.mkdir(parents=True)
    (backups / "SOUL.md.2026-11-01").write_text(original.replace("# SOUL", "# OLD SOUL"))
    with own_data_dir(example / "data", "b"):  # a daemon serving, of any instance
        rolled = soulbot("soul", "rollback", "twinkle", "2026-11-01", cwd=example)
        epoch = soulbot("soul", "epoch", "twinkle", cwd=example)
    head = f"error: soulbot (pid {os.getpid()}) serves data (instance b): "
    assert (rolled.returncode, epoch.returncode) == (1, 1)
    assert rolled.stderr.splitlines() == [
        head + "roll back from the chat with `/soul rollback twinkle 2026-11-01`, or stop the "
        "daemon first; SOUL.md was not changed"
    ]
    assert epoch.stderr.splitlines() == [
        head + "start it from the chat with `/soul epoch twinkle`, or stop the daemon first; "
        "SOUL.md was not changed"
    ]
    assert soul_md.read_text() == original


# Two soulbot processes and a store each time.
@pytest.mark.timeout(120)
def test_soul_epoch_on_a_shared_store_is_refused_beside_a_daemon_of_another_host(
    example: Path,
) -> None:
    """On PostgreSQL a daemon may serve from another host: its pid file says
    nothing here, its fresh row in `processes` does. Once that row is stale
    (the daemon is gone), the epoch is written, under the soul's lock."""
    import asyncio

    from bot.cluster.topology import STALE_S, Process, Topology
    from bot.storage.db import Database
    from tests.engines import postgres_schema

    soul_md = example / "workspaces" / "twinkle" / "SOUL.md"
    original = soul_md.read_text()
    elsewhere = Process("b", "host-b", 4242, str(example / "data"), False, True, None, None)

    async def registered(when: float) -> None:
        db = Database(url)
        await db.open()
        try:
            await Topology(db, elsewhere, clock=lambda: when).join()
        finally:
            await db.close()

    with postgres_schema() as url:
        env = {"SOULBOT_STORE_URL": url}
        asyncio.run(registered(time.time()))
        refused = soulbot("soul", "epoch", "twinkle", cwd=example, env=env)
        assert refused.returncode == 1
        assert refused.stderr.splitlines() == [
            "error: soulbot instance b (host host-b, pid 4242) serves this store: start it from "
            "the chat with `/soul epoch twinkle`, or stop the daemon first; SOUL.md was not changed"
        ]
        assert soul_md.read_text() == original
        asyncio.run(registered(time.time() - STALE_S - 1))
        done = soulbot("soul", "epoch", "twinkle", cwd=example, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("twinkle: epoch 1 started")


def test_check_warns_about_links_out_of_a_soul_and_an_open_data_dir(example: Path) -> None:
    outside = example / "outside"
    (outside / "notes").mkdir(parents=True)
    (outside / "secret.md").write_text("the launch code is 0000\n")
    memory = example / "workspaces" / "wren" / "memory"
    (memory / "concepts" / "secret.md").symlink_to(outside / "secret.md")
    (memory / "entities").symlink_to(outside / "notes", target_is_directory=True)
    (memory / "concepts" / "me.md").symlink_to(memory.parent / "SOUL.md")  # inside: fine
    data = example / "data"
    data.mkdir()
    data.chmod(0o755)
    result = soulbot("check", cwd=example)
    assert result.returncode == 0, result.stdout + result.stderr
    warnings = result.stdout.split("warnings:")[1].split("\n\n")[0].strip().splitlines()
    assert [line.strip() for line in warnings] == [
        f"workspaces/wren/memory/concepts/secret.md: a link to {outside / 'secret.md'}, outside "
        "the soul folder: soulbot neither reads nor writes through it",
        f"workspaces/wren/memory/entities: a link to {outside / 'notes'}, outside the soul "
        "folder: soulbot neither reads nor writes through it",
        "data: data_dir is open to group or others (mode 755); it holds private data: "
        "chmod 700 data",
    ]
    assert "2 soul(s) loaded, no errors" in result.stdout
    data.chmod(0o700)
    (memory / "concepts" / "secret.md").unlink()
    (memory / "entities").unlink()
    assert "warnings:" not in soulbot("check", cwd=example).stdout


def test_usage_on_a_corrupt_database_is_one_line(example: Path) -> None:
    (example / "data").mkdir()
    (example / "data" / "soulbot.db").write_bytes(b"this is not a database" * 100)
    result = soulbot("usage", cwd=example)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "soulbot.db" in result.stderr and "Traceback" not in result.stderr
