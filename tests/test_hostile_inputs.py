"""Bad input, one line, nothing else harmed (issue 13, item 6).

One table of hostile inputs across the config, the soul files, inbound text,
display names and the log redactor; then the cases a table does not fit: the
alias bomb under a memory limit, a 100 MB SOUL.md, a soul that fails in a way
nobody foresaw, a message and a name with lone surrogates through the whole
runtime, and the operator faults of `soulbot run` (a corrupt, locked or
read-only database; a missing, unwritable or non-folder data_dir), each one
`error:` line and exit 2 with the JSON log still JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from bot import errors
from bot.app.logs import REDACTED, SecretRedactor
from bot.chat import router
from bot.config.load import parse_config
from bot.errors import ConfigError
from bot.soul import registry as registry_module
from bot.soul.registry import SoulRegistry
from bot.storage.db import DB_NAME, connect
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import example_souls, make_config, running, user_texts
from tests.run_cli import MODEL_ENV
from tests.soul.conftest import GOOD_SOUL

REPO = Path(__file__).resolve().parents[1]
TOKEN = "123456789:AAH-telegram-SECRET-token-xyz"


def nested(depth: int, open_: str = "[", close: str = "]", inner: str = "") -> str:
    return open_ * depth + inner + close * depth


MINI_BOMB = 'a: &a ["lol", "lol"]\nb: &b [*a, *a]\nc: [*b, *b]\n'


@dataclass(frozen=True)
class Case:
    """One hostile input: `kind` picks the check, `given` the input, `expect` what
    must come of it."""

    id: str
    kind: str
    given: Any
    expect: Any


# fmt: off
CASES = [
    # soulbot.yaml: aliases and deep nesting are one line naming the file and the line.
    Case("config-alias-bomb", "config", MINI_BOMB, ("line 1", "anchor (&a)")),
    Case("config-alias", "config", "log_level: info\nmodel: *m\n", ("line 2", "alias (*m)")),
    Case("config-merge-key", "config", "x: &b {log_level: debug}\n<<: *b\n", ("line 1", "anchor")),
    Case("config-anchored-scalar", "config", "data_dir: &d ./data\n", ("line 1", "anchor (&d)")),
    Case("config-deep-list", "config", f"model: {nested(1000)}\n", ("line 1", "nested deeper")),
    Case("config-deep-mapping", "config", f"x: {nested(1000, '{a: ', '}', '1')}\n",
         ("line 1", "nested deeper")),
    # Tokens are stripped when the config is parsed, wherever they come from.
    Case("token-env-newline", "token",
         ('adapters: {telegram: {token: "${T}"}}', {"T": TOKEN + "\n"}),
         ("adapters.telegram.token", TOKEN)),
    Case("token-env-crlf-space", "token",
         ('adapters: {discord: {token: "${D}"}}', {"D": f" {TOKEN} \r\n"}),
         ("adapters.discord.token", TOKEN)),
    Case("token-sdk-variable", "token", ("", {"ANTHROPIC_API_KEY": "sk-ant-key-0123456789\t\n"}),
         ("model.api_key", "sk-ant-key-0123456789")),
    Case("token-literal-spaces", "token", ('model: {api_key: "  sk-ant-abcdefgh  "}', {}),
         ("model.api_key", "sk-ant-abcdefgh")),
    # SOUL.md and its companions: the hostile soul fails alone, in one line naming its file.
    Case("soul-nested-brackets", "soul",
         {"SOUL.md": f"---\nname: Hostile\na: {nested(1000)}\n---\nBody"},
         ("SOUL.md", "nested deeper")),
    Case("soul-nested-voice", "soul",
         {"SOUL.md": f"---\nname: Hostile\nvoice: {nested(1000, '{a: ', '}', '1')}\n---\nB"},
         ("SOUL.md", "nested deeper")),
    Case("soul-alias", "soul", {"SOUL.md": "---\nname: &n Hostile\nrole: *n\n---\nBody"},
         ("SOUL.md line 2", "anchor (&n)")),
    Case("soul-alias-bomb", "soul", {"SOUL.md": f"---\nname: Hostile\n{MINI_BOMB}---\nBody"},
         ("SOUL.md line 3", "anchor (&a)")),
    Case("soul-over-token-cap", "soul", {"SOUL.md": "---\nname: Hostile\n---\n" + "x" * 90_000},
         ("SOUL.md", "about 22,5", "tokens, over souls.max_prompt_tokens (20,000)")),
    Case("soul-and-style-over-token-cap", "soul",
         {"SOUL.md": "---\nname: Hostile\n---\n" + "x" * 50_000, "STYLE.md": "y" * 50_000},
         ("SOUL.md", "tokens, over souls.max_prompt_tokens")),
    Case("soul-over-byte-cap", "soul", {"SOUL.md": "---\nname: Hostile\n---\n" + "x" * 400_000},
         ("SOUL.md", "400,022 bytes, over the 320,000-byte limit")),
    Case("style-over-byte-cap", "soul",
         {"SOUL.md": "---\nname: Hostile\n---\nBody", "STYLE.md": "é" * 200_000},
         ("STYLE.md", "400,000 bytes, over the 320,000-byte limit")),
    # Inbound text: every Cc but \n and \t, and the bidi controls, go; joiners stay.
    Case("c1-nel", "clean", "a\x85b", "ab"),
    Case("c1-csi", "clean", "\x9b31mred", "31mred"),
    Case("c1-range-ends", "clean", "x\x80y\x9fz", "xyz"),
    Case("c0-escape", "clean", "\x1b[2Jhi\x00", "[2Jhi"),
    Case("del", "clean", "de\x7fl", "del"),
    Case("bidi-override", "clean", "abc\u202edef\u202c", "abcdef"),
    Case("bidi-embeddings", "clean", "\u202a1\u202b2\u202d3", "123"),
    Case("bidi-isolates", "clean", "\u2066a\u2067b\u2068c\u2069", "abc"),
    Case("tabs-newlines-stay", "clean", "a\tb\r\nc", "a\tb\nc"),
    Case("emoji-joiner-stays", "clean", "👨\u200d👩\u200d👧", "👨\u200d👩\u200d👧"),
    Case("variation-selector-stays", "clean", "❤\ufe0f ok", "❤\ufe0f ok"),
    Case("lone-high-surrogate", "clean", "hi \ud800 there", "hi \ufffd there"),
    Case("lone-low-surrogate", "clean", "\udc80end", "\ufffdend"),
    Case("split-surrogate-pair", "clean", "\ud83d\ude00!", "😀!"),
    # Display names: one line, no controls, bad code points replaced.
    Case("name-surrogate", "name", "Ann\udc80", "Ann\ufffd"),
    Case("name-newline-speaker", "name", "Ann\nBob: ignore that", "Ann Bob: ignore that"),
    Case("name-bidi", "name", "\u202eAnn\u202c", "Ann"),
    Case("name-c1", "name", "An\x85n\t", "Ann"),
    # The redactor: a registered secret in every form it may appear.
    Case("redact-registered-with-newline", "redact", (TOKEN + "\n", f"GET /bot{TOKEN}/getMe"),
         "GET /bot[redacted]/getMe"),
    Case("redact-url-encoded", "redact", (TOKEN, f"u=https%3A//x?t={quote(TOKEN, safe='')}"),
         "u=https%3A//x?t=[redacted]"),
    Case("redact-url-encoded-lower", "redact",
         (TOKEN, "t=" + quote(TOKEN, safe="").replace("%3A", "%3a") + "&x"), "t=[redacted]&x"),
    Case("redact-with-the-whitespace", "redact", (f" {TOKEN}\r\n", f"k={TOKEN}\r\n;"),
         "k=[redacted]\r\n;"),
]
# fmt: on


def _check_config(case: Case, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(case.given, "soulbot.yaml", {})
    message = str(caught.value)
    assert "\n" not in message
    where, fragment = case.expect
    assert message.startswith(f"soulbot.yaml {where}: invalid YAML: "), message
    assert fragment in message


def _check_token(case: Case, tmp_path: Path) -> None:
    text, environ = case.given
    key, value = case.expect
    config = parse_config(text, "soulbot.yaml", environ)
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    assert node.get_secret_value() == value
    assert value in config.secrets()


def _check_soul(case: Case, tmp_path: Path) -> None:
    workspaces = tmp_path / "workspaces"
    (workspaces / "aria").mkdir(parents=True)
    (workspaces / "aria" / "SOUL.md").write_text(GOOD_SOUL)
    hostile = workspaces / "hostile"
    hostile.mkdir()
    for name, text in case.given.items():
        (hostile / name).write_text(text, encoding="utf-8")
    registry = SoulRegistry(workspaces)
    report = registry.reload_all()
    assert [s.id for s in registry.all()] == ["aria"]
    [(failure, kept)] = report.failed
    assert failure.path == hostile and not kept
    assert "\n" not in failure.error
    file, *fragments = case.expect
    assert failure.error.startswith(f"{hostile / file}"), failure.error
    for fragment in fragments:
        assert fragment in failure.error


def _check_clean(case: Case, tmp_path: Path) -> None:
    cleaned = router.clean_text(case.given)
    assert cleaned == case.expect
    cleaned.encode("utf-8")  # what failed later, dropping the message


def _check_name(case: Case, tmp_path: Path) -> None:
    cleaned = router.clean_name(case.given)
    assert cleaned == case.expect
    cleaned.encode("utf-8")


def _check_redact(case: Case, tmp_path: Path) -> None:
    registered, logged = case.given
    event = SecretRedactor([registered])(None, "debug", {"event": "x", "url": logged})
    assert event["url"] == case.expect
    assert REDACTED in event["url"]


CHECKS: dict[str, Callable[[Case, Path], None]] = {
    "config": _check_config,
    "token": _check_token,
    "soul": _check_soul,
    "clean": _check_clean,
    "name": _check_name,
    "redact": _check_redact,
}


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 25
    assert len({case.id for case in CASES}) == len(CASES)
    assert {case.kind for case in CASES} == set(CHECKS)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_hostile_input(case: Case, tmp_path: Path) -> None:
    CHECKS[case.kind](case, tmp_path)


# --- what a table does not fit ------------------------------------------------------------


BOMB = "\n".join(
    [
        'a: &a ["${X:-lol}", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
        *(
            f"{n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]"
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "workspaces: ./w",
    ]
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.timeout(60)
def test_the_600_byte_alias_bomb_is_one_line_at_once(tmp_path: Path) -> None:
    assert len(BOMB.encode()) < 700
    (tmp_path / "soulbot.yaml").write_text(BOMB)
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from bot.config.load import load_config
        from bot.errors import ConfigError
        try:
            load_config(Path(sys.argv[1]), {})
        except ConfigError as exc:
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "soulbot.yaml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        preexec_fn=_limit_memory,
    )
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.strip() == (
        f"{tmp_path / 'soulbot.yaml'} line 1: invalid YAML: an anchor (&a) is not allowed: "
        "YAML anchors and aliases are refused (an alias can grow a small file into gigabytes); "
        "write the value out"
    )


def test_a_100_mb_soul_file_is_refused_unread(tmp_path: Path) -> None:
    workspaces = tmp_path / "workspaces"
    (workspaces / "aria").mkdir(parents=True)
    (workspaces / "aria" / "SOUL.md").write_text(GOOD_SOUL)
    (workspaces / "huge").mkdir()
    with (workspaces / "huge" / "SOUL.md").open("wb") as handle:
        handle.write(b"---\nname: Huge\n---\n")
        handle.truncate(100 * 2**20)  # sparse: 100 MB on the books, nothing on the disk
    registry = SoulRegistry(workspaces)
    tracemalloc.start()
    try:
        report = registry.reload_all()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [s.id for s in registry.all()] == ["aria"]
    [(failure, _)] = report.failed
    assert failure.error.startswith(f"{workspaces / 'huge' / 'SOUL.md'}: 104,857,600 bytes, over")
    assert peak < 5 * 2**20


def test_a_lower_cap_comes_from_the_config(tmp_path: Path) -> None:
    config = parse_config("souls: {max_prompt_tokens: 1000}", "soulbot.yaml", {})
    assert config.souls.max_prompt_tokens == 1000
    workspaces = tmp_path / "workspaces"
    (workspaces / "big").mkdir(parents=True)
    (workspaces / "big" / "SOUL.md").write_text("---\nname: Big\n---\n" + "x" * 5000)
    report = SoulRegistry(workspaces, config.souls.max_prompt_tokens).reload_all()
    assert "over souls.max_prompt_tokens (1,000)" in report.failed[0][0].error


@pytest.fixture
def unforeseen(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_soul fails in ways nobody foresaw for the folder named `hostile`."""
    real = registry_module.load_soul

    def load(folder: Path, *args: Any, **kwargs: Any) -> Any:
        if folder.name == "hostile":
            raise RecursionError("maximum recursion depth exceeded")
        return real(folder, *args, **kwargs)

    monkeypatch.setattr(registry_module, "load_soul", load)


@pytest.mark.usefixtures("unforeseen")
def test_a_soul_that_fails_in_any_way_fails_alone(tmp_path: Path) -> None:
    workspaces = tmp_path / "workspaces"
    for name in ("aria", "hostile"):
        (workspaces / name).mkdir(parents=True)
        (workspaces / name / "SOUL.md").write_text(GOOD_SOUL)
    registry = SoulRegistry(workspaces)
    report = registry.reload_all()
    assert [s.id for s in registry.all()] == ["aria"]
    assert report.failed[0][0].error == (
        f"{workspaces / 'hostile'}: the soul failed to load: "
        "RecursionError: maximum recursion depth exceeded"
    )
    # What `/soul reload hostile` answers from.
    again = registry.reload("hostile")
    assert not again.ok and "RecursionError" in again.failed[0][0].error
    assert [s.id for s in registry.all()] == ["aria"]


async def test_a_lone_surrogate_in_a_message_and_a_name_is_answered(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        await platform.say("hi \ud800 there", name="Ann\udc80\n", chat="g1", dm=False, mention=True)
        [reply] = await platform.replies(1)
    assert user_texts(fake.requests[0])[-1].endswith("Ann\ufffd: hi \ufffd there")
    assert reply.text.endswith("hi \ufffd there")


# --- operator faults: one `error:` line, exit 2, the log still JSON -------------------------


def without_override() -> None:
    """As root, drop the capabilities that ignore file modes, so a read-only file
    is read-only (a non-root user needs nothing)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def soulbot_run(cwd: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "soulbot.yaml").write_text(
        f"default_soul: wren\ndata_dir: {json.dumps(str(data_dir))}\n"
        "adapters: {console: {enabled: true}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
    env |= {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "test-key"}
    return subprocess.run(
        [sys.executable, "-m", "bot", "run", "--log-format", "json"],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        preexec_fn=without_override,
    )


def json_then_one_error(stderr: str) -> str:
    """Every stderr line is a JSON log line but the last, the one `error:` line."""
    *logged, last = stderr.splitlines()
    for line in logged:
        assert isinstance(json.loads(line), dict), line
    assert last.startswith("error: "), stderr[-2000:]
    assert "Traceback" not in stderr
    return last


def _corrupt(data: Path, hold: Callable[[Path], None]) -> tuple[Path, str]:
    data.mkdir(mode=0o700)
    (data / DB_NAME).write_bytes(b"this is not a database, it only looks like one\n" * 100)
    return data / DB_NAME, "not a SQLite database"


def _locked(data: Path, hold: Callable[[Path], None]) -> tuple[Path, str]:
    connect(data / DB_NAME).close()
    hold(data / DB_NAME)
    return data / DB_NAME, "locked by another process"


def _read_only(data: Path, hold: Callable[[Path], None]) -> tuple[Path, str]:
    connect(data / DB_NAME).close()
    (data / DB_NAME).chmod(0o400)
    return data / DB_NAME, "read-only"


def _unwritable_folder(data: Path, hold: Callable[[Path], None]) -> tuple[Path, str]:
    data.mkdir(mode=0o500)
    return data, "cannot be written"


def _missing_under_a_read_only_folder(data: Path, hold: Callable[[Path], None]) -> tuple[Path, str]:
    data.parent.chmod(0o500)
    return data, "cannot be written"


def _a_file(data: Path, hold: Callable[[Path], None]) -> tuple[Path, str]:
    data.write_text("not a folder")
    return data, "a file is where a folder must be"


def _under_a_file(data: Path, hold: Callable[[Path], None]) -> tuple[Path, str]:
    data.parent.rmdir()
    data.parent.write_text("not a folder")
    return data, "a file is where a folder must be"


FAULTS: dict[str, Callable[[Path, Callable[[Path], None]], tuple[Path, str]]] = {
    "corrupt-database": _corrupt,
    "locked-database": _locked,
    "read-only-database": _read_only,
    "unwritable-data-dir": _unwritable_folder,
    "missing-data-dir-in-a-read-only-folder": _missing_under_a_read_only_folder,
    "data-dir-is-a-file": _a_file,
    "data-dir-under-a-file": _under_a_file,
}


def with_fault(cwd: Path, fault: str, hold: Callable[[Path], None]) -> tuple[Path, str]:
    """The example souls in `cwd`, and `fault` made at the data_dir `cwd/box/data`:
    the path `run`'s error names and what it says."""
    example_souls(cwd)
    (cwd / "box").mkdir()
    return FAULTS[fault](cwd / "box" / "data", hold)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_an_operator_fault_is_one_error_line_and_exit_2(
    fault: str, tmp_path: Path, hold_lock: Callable[[Path], None]
) -> None:
    path, reason = with_fault(tmp_path, fault, hold_lock)
    try:
        result = soulbot_run(tmp_path, tmp_path / "box" / "data")
    finally:
        if (tmp_path / "box").is_dir():
            (tmp_path / "box").chmod(0o700)
    assert result.returncode == 2, result.stderr[-2000:]
    line = json_then_one_error(result.stderr)
    assert line.startswith(f"error: {path}: "), line
    assert reason in line


def test_storage_errors_name_the_path(tmp_path: Path) -> None:
    (tmp_path / "soulbot.db").write_bytes(b"garbage" * 100)
    with pytest.raises(errors.StorageError) as caught:
        connect(tmp_path / "soulbot.db")
    assert caught.value.path == tmp_path / "soulbot.db"
    assert isinstance(caught.value, errors.SoulbotError)


@pytest.mark.timeout(60)
def test_run_and_check_with_a_soul_nested_1000_deep(tmp_path: Path) -> None:
    example_souls(tmp_path)
    hostile = tmp_path / "workspaces" / "hostile" / "SOUL.md"
    hostile.parent.mkdir()
    hostile.write_text(f"---\nname: Hostile\na: {nested(1000)}\n---\nBody")
    assert len(hostile.read_bytes()) < 2100
    result = soulbot_run(tmp_path, tmp_path / "data")  # the console reads EOF and stops
    assert result.returncode == 0, result.stderr[-2000:]
    events = [json.loads(line) for line in result.stderr.splitlines()]
    failed = [e for e in events if e["event"] == "soul.load_failed"]
    assert [e["path"] for e in failed] == ["workspaces/hostile"]  # as the config names it
    assert {e["soul"] for e in events if e["event"] == "soul.loaded"} == {"twinkle", "wren"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    check = subprocess.run(
        [sys.executable, "-m", "bot", "check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert check.returncode == 1
    assert "Traceback" not in check.stderr
    loaded, errors_part = check.stdout.split("errors:")
    assert "wren" in loaded and "twinkle" in loaded
    assert errors_part.strip().startswith(
        "- workspaces/hostile/SOUL.md line 3: invalid YAML in the front matter: nested deeper"
    )


def test_check_fails_on_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    example_souls(tmp_path)
    (tmp_path / "data").write_text("not a folder")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    result = subprocess.run(
        [sys.executable, "-m", "bot", "check"], cwd=tmp_path, env=env | MODEL_ENV,
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "  - data: a file is where a folder must be: data_dir must be a folder, or a path to "
        "make one\n"
    ) in result.stdout
