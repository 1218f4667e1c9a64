"""`soulbot check` says what will run: the paths as absolute paths, which adapters
start and why, tokens that cannot be tokens (named by key, never shown), the model
(its name, with a did-you-mean when the price table knows no such model; where it
is served; whether a key is set, never the key; a missing key and base URL is an
error naming `make fake`), and with `--online` what Telegram, Discord and the
model say (the fakes, on loopback: a 1-token call says who answers, a forced tool
call whether tools work). Without `--online` nothing is asked."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.process import FakeProcess
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import example_souls
from tests.run_cli import MODEL_ENV, soulbot

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "soulbot.example.yaml"
# Of the platforms' shapes, and plainly no one's token.
TG_TOKEN = "123456:AAtest-token-made-for-the-fake-0123"
DC_TOKEN = "TEST-DISCORD-TOKEN-OF-THE-FAKE.test.SIGNATURE-OF-THE-FAKE-BOT"
PLATFORM_VARS = ("TELEGRAM_", "DISCORD_", "SOULBOT_")
# The example config's default soul is wren: twinkle, the example soul with heartbeat
# regions, answers nowhere.
TWINKLE = (
    "twinkle: its heartbeat never writes SOUL.md: it answers nowhere (it is not the default "
    "soul, and no binding on a platform that starts names it)"
)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """The example config and souls in tmp_path (run from there)."""
    example_souls(tmp_path)
    shutil.copy(EXAMPLE, tmp_path / "soulbot.yaml")
    return tmp_path


def _environ(env: dict[str, str]) -> dict[str, str]:
    """The test's environment with no platform setting but `env`'s, and a model key."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_VARS)}
    return {**environ, **MODEL_ENV, **env}


def check(cwd: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """`soulbot check ARGS` with only the platform variables of `env`: (exit code,
    stdout, stderr)."""
    result = soulbot("check", *args, cwd=cwd, env=_environ(env))
    return result.returncode, result.stdout, result.stderr


async def check_async(cwd: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """`check`, while this test's event loop serves the fakes."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "check", *args, cwd=cwd, env=_environ(env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def part(output: str, title: str) -> list[str]:
    """The lines of `title:`'s part, unindented."""
    after = output.split(f"\n{title}:\n", 1)[1]
    return [line.strip() for line in after.split("\n\n", 1)[0].splitlines()]


def closed_port_url() -> str:
    """A loopback URL nothing listens on (the port was just free)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- paths ---------------------------------------------------------------------------


def test_paths_are_shown_as_the_absolute_paths_they_are(example: Path) -> None:
    code, out, err = check(example)
    assert code == 0, out + err
    root = example.resolve()
    assert part(out, "paths") == [
        f"workspaces: {root / 'workspaces'}",
        f"data_dir: {root / 'data'} (not there yet: `soulbot run` makes it)",
        f"store: SQLite, {root / 'data' / 'soulbot.db'}",
        f"(relative paths are taken from the folder soulbot starts in: {root})",
    ]
    (example / "data").mkdir(mode=0o700)
    (example / "sub").mkdir()
    config = example / "soulbot.yaml"
    elsewhere = example / "elsewhere"
    shutil.move(example / "workspaces", elsewhere)
    config.write_text(
        config.read_text()
        .replace("workspaces: ./workspaces", f"workspaces: {elsewhere}")
        .replace("data_dir: ./data", f"data_dir: {example / 'sub' / '..' / 'data'}")
    )
    code, out, err = check(example)
    assert code == 0, out + err
    assert part(out, "paths") == [
        f"workspaces: {elsewhere.resolve()}",
        f"data_dir: {root / 'data'}",
        f"store: SQLite, {root / 'data' / 'soulbot.db'}",
    ]


def test_a_postgresql_store_is_shown_without_its_password(example: Path) -> None:
    """And asked, read-only, what `run` would meet there: a server it cannot reach."""
    code, out, err = check(
        example,
        SOULBOT_STORE_URL="postgresql://bot:hunter2@db.example:5433/souls",
        SOULBOT_INSTANCE="shards-0-1",
    )
    assert code == 1, out + err
    assert "store: postgresql://bot@db.example:5433/souls (instance shards-0-1)" in part(
        out, "paths"
    )
    [error] = part(out, "errors")
    assert error.startswith("- postgresql://bot@db.example:5433/souls: cannot be reached or used: ")
    assert "hunter2" not in out + err


@pytest.mark.parametrize("command", ["check", "usage"])
@pytest.mark.parametrize(
    "url",
    ["postgresql://bot:hunter2 secret@db.example/souls", "postgresql://bot:hunter2@[::1/souls"],
    ids=["refused by the config", "refused by libpq"],
)
def test_an_invalid_postgresql_url_is_shown_without_its_password(
    example: Path, command: str, url: str
) -> None:
    result = soulbot(command, "--log-format", "json", cwd=example,
                     env=_environ({"SOULBOT_STORE_URL": url}))  # fmt: skip
    said = result.stdout + result.stderr
    assert "postgresql://bot:***@" in said
    assert "hunter2" not in said


def test_a_missing_workspaces_folder_is_named_by_its_absolute_path(example: Path) -> None:
    shutil.rmtree(example / "workspaces")
    code, out, err = check(example)
    assert code == 1 and out == ""
    root = example.resolve()
    assert err.strip() == (
        f"error: workspaces: {root / 'workspaces'} does not exist (relative paths are taken "
        f"from the folder soulbot starts in: {root}); `soulbot run`, `chat` or `init` make "
        "it, with the example souls"
    )
    assert not (example / "workspaces").exists(), "check made the folder"
    (example / "workspaces").write_text("a file")
    code, _, err = check(example)
    assert code == 1 and f"workspaces: {root / 'workspaces'} is not a folder (" in err
    config = example / "soulbot.yaml"
    gone = example / "gone"
    config.write_text(config.read_text().replace("workspaces: ./workspaces", f"workspaces: {gone}"))
    code, _, err = check(example)
    assert code == 1 and err.strip() == (
        f"error: workspaces: {gone.resolve()} does not exist; `soulbot run`, `chat` or "
        "`init` make it, with the example souls"
    )


# --- which adapters start ------------------------------------------------------------


def test_with_no_token_the_terminal_chat_alone_starts(example: Path) -> None:
    code, out, err = check(example)
    assert code == 0, out + err
    assert part(out, "platforms") == [
        "telegram: off (adapters.telegram.token is not set)",
        "discord: off (adapters.discord.token is not set)",
        "terminal chat: on (adapters.console.enabled is auto and no platform token is set)",
    ]
    assert "no platform was asked" not in out  # no token: nothing --online could ask


def test_both_platforms_with_a_webhook_and_shards(example: Path) -> None:
    config = example / "soulbot.yaml"
    config.write_text(
        config.read_text()
        .replace("shard_count: null", "shard_count: 4")
        .replace("shard_ids: null", "shard_ids: [0, 2]")
    )
    code, out, err = check(
        example,
        TELEGRAM_TOKEN=TG_TOKEN,
        DISCORD_TOKEN=DC_TOKEN,
        TELEGRAM_WEBHOOK_URL="https://bot.example.org/telegram",
        TELEGRAM_WEBHOOK_SECRET="s3cret",
    )
    assert code == 0, out + err
    assert part(out, "platforms") == [
        "telegram: on, webhook at https://bot.example.org/telegram (updates taken on "
        "127.0.0.1:8443, path /telegram)",
        "discord: on, shards 0, 2 of 4",
        "terminal chat: off (adapters.console.enabled is auto and a platform token is set; "
        "`soulbot chat` opens one anyway)",
    ]
    assert TG_TOKEN not in out + err and DC_TOKEN not in out + err
    config.write_text(config.read_text().replace("shard_ids: [0, 2]", "shard_ids: null"))
    _, out, err = check(example, DISCORD_TOKEN=DC_TOKEN, SOULBOT_CONSOLE="true")
    assert part(out, "platforms") == [
        "telegram: off (adapters.telegram.token is not set)",
        "discord: on, all 4 shards",
        "terminal chat: on (adapters.console.enabled: true)",
    ]
    _, out, err = check(example, TELEGRAM_TOKEN=TG_TOKEN)
    assert part(out, "platforms")[:2] == [
        "telegram: on, polling",
        "discord: off (adapters.discord.token is not set)",
    ]


def test_when_nothing_would_start_check_says_so_and_fails(example: Path) -> None:
    code, out, _ = check(example, SOULBOT_CONSOLE="false")
    assert code == 1
    assert part(out, "platforms")[2:] == [
        "terminal chat: off (adapters.console.enabled: false; `soulbot chat` opens one anyway)",
        "nothing will start: `soulbot run` stops at once (see errors)",
    ]
    assert part(out, "errors") == [
        "- adapters: no adapter is enabled: set adapters.telegram.token or "
        "adapters.discord.token, or adapters.console.enabled: true"
    ]


# --- token shapes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "flaw"),
    [
        ("abc", "it has no ':'"),
        ("bot123456:AAtest-token-made-for-the-fake-0123", "what comes before ':' is not the "
         "bot's number"),
        ("123456:AAtest token made for the fake-0123", "what comes after ':' has characters "
         "other than letters, digits, - and _"),
        ("123456:TEST-TOKEN", "what comes after ':' is 10 characters long"),
    ],
    ids=["no-colon", "not-a-number", "a-space", "short"],
)  # fmt: skip
def test_a_telegram_token_of_the_wrong_shape(example: Path, token: str, flaw: str) -> None:
    code, out, err = check(example, TELEGRAM_TOKEN=token)
    assert code == 1
    assert part(out, "errors") == [
        f"- adapters.telegram.token: not a Telegram bot token: {flaw}; BotFather's look like "
        "123456789:AA... (the bot's number, ':', then 35 letters, digits, - and _)"
    ]
    assert token not in out + err
    assert "no platform was asked" not in out  # a token that cannot be one is not offered


@pytest.mark.parametrize(
    ("token", "flaw"),
    [
        (f"Bot {DC_TOKEN}", "it starts with 'Bot ': set the token alone"),
        ("a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4", "it has 1 part(s) separated by '.', a bot token "
         "has 3 (the Client Secret and the Application ID are not the token)"),
        ("TEST-DISCORD-TOKEN-OF-THE-FAKE.te$t.SIGNATURE-OF-THE-FAKE-BOT", "it has characters "
         "other than letters, digits, - and _ between its dots"),
        ("TEST.DISCORD.TOKEN", "its parts are too short for a bot token (4, 7, 5 characters)"),
    ],
    ids=["bot-prefix", "client-secret", "a-dollar", "short"],
)  # fmt: skip
def test_a_discord_token_of_the_wrong_shape(example: Path, token: str, flaw: str) -> None:
    code, out, err = check(example, DISCORD_TOKEN=token)
    assert code == 1
    assert part(out, "errors") == [
        f"- adapters.discord.token: not a Discord bot token: {flaw}; copy it from the "
        "Developer Portal, Bot page (Reset Token)"
    ]
    assert token not in out + err


# --- asking the platforms ------------------------------------------------------------


async def test_without_online_no_platform_is_asked(example: Path) -> None:
    async with FakeTelegram(token=TG_TOKEN) as tg, FakeDiscord(token=DC_TOKEN) as dc:
        code, out, err = await check_async(
            example, TELEGRAM_TOKEN=TG_TOKEN, TELEGRAM_BASE_URL=tg.base_url,
            DISCORD_TOKEN=DC_TOKEN, DISCORD_API_BASE_URL=dc.api_base_url,
        )  # fmt: skip
        assert tg.calls == [] and dc.requests == []
    assert code == 0, out + err
    assert part(out, "notes") == [
        TWINKLE,
        "no platform was asked: with --online, check asks Telegram (getMe: the token, privacy "
        "mode) and Discord (the token, the Message Content intent)",
    ]


@pytest.mark.parametrize("privacy", [True, False])
async def test_online_says_when_telegram_privacy_mode_hides_the_groups(
    example: Path, privacy: bool
) -> None:
    async with FakeTelegram(token=TG_TOKEN) as tg, FakeAnthropic() as model:
        tg.privacy_mode = privacy
        code, out, err = await check_async(
            example, "--online", TELEGRAM_TOKEN=TG_TOKEN, TELEGRAM_BASE_URL=tg.base_url,
            ANTHROPIC_BASE_URL=model.url,
        )  # fmt: skip
        assert [c.method.lower() for c in tg.calls] == ["getme"]
    assert code == 0, out + err
    assert ("Telegram privacy mode is on" in out) is privacy
    assert "no platform was asked" not in out
    assert TG_TOKEN not in out + err


@pytest.mark.parametrize(
    ("flags", "intent"), [(1 << 18, True), (1 << 19, True), (0, False)],
    ids=["verified", "unverified", "off"],
)  # fmt: skip
async def test_online_fails_when_the_message_content_intent_is_off(
    example: Path, flags: int, intent: bool
) -> None:
    async with FakeDiscord(token=DC_TOKEN, application_flags=flags) as dc, FakeAnthropic() as m:
        code, out, err = await check_async(
            example, "--online", DISCORD_TOKEN=DC_TOKEN, DISCORD_API_BASE_URL=dc.api_base_url,
            ANTHROPIC_BASE_URL=m.url,
        )  # fmt: skip
        assert any(r.path == "/applications/@me" for r in dc.requests)
    intent_off = (
        "- adapters.discord: the Message Content intent is off: turn it on in the Developer "
        "Portal, Bot page"
    )
    if intent:
        assert code == 0, out + err
        assert "errors:" not in out
    else:
        assert code == 1
        assert part(out, "errors") == [intent_off]
    assert DC_TOKEN not in out + err


async def test_online_with_platforms_that_do_not_answer_or_refuse_the_token(
    example: Path,
) -> None:
    """A note each, no error: the check cannot tell (exit 0)."""
    async with (
        FakeTelegram(token="654321:AAanother-bot-of-the-fake-00000000") as tg,
        FakeAnthropic() as model,
    ):
        code, out, err = await check_async(
            example, "--online", TELEGRAM_TOKEN=TG_TOKEN, TELEGRAM_BASE_URL=tg.base_url,
            DISCORD_TOKEN=DC_TOKEN, DISCORD_API_BASE_URL=closed_port_url() + "/api/v10",
            ANTHROPIC_BASE_URL=model.url,
        )  # fmt: skip
    assert code == 0, out + err
    assert part(out, "notes") == [
        TWINKLE,
        "telegram: no answer to getMe (Telegram unreachable, or the token refused)",
        "discord: no answer about the application (Discord unreachable, or the token refused)",
    ]


# --- the model ----------------------------------------------------------------------

KEY = "sk-ant-test-KEEPTHISHIDDEN-0123456789"


def _name(example: Path, name: str) -> None:
    config = example / "soulbot.yaml"
    config.write_text(config.read_text().replace("name: claude-sonnet-4-6", f"name: {name}"))


def test_the_model_part_names_the_model_and_where_never_the_key(example: Path) -> None:
    code, out, err = check(example, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL="")
    assert code == 0, out + err
    assert part(out, "model") == [
        "name: claude-sonnet-4-6",
        "served at: https://api.anthropic.com (the Anthropic API: model.base_url and "
        "ANTHROPIC_BASE_URL unset)",
        "API key: set",
        "not asked: with --online, check makes a 1-token call and a tiny tool call",
    ]
    assert "KEEPTHISHIDDEN" not in out + err
    code, out, err = check(
        example, ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="http://proxy:pa55word@127.0.0.1:9/x"
    )
    assert code == 0, out + err
    assert part(out, "model")[1:3] == ["served at: http://127.0.0.1:9/x", "API key: not set"]
    assert "pa55word" not in out + err


@pytest.mark.parametrize(
    ("name", "hint"),
    [("claude-sonet-4-6", " (did you mean 'claude-sonnet-4-6'?)"), ("gpt-4o", "")],
    ids=["misspelt", "another-provider"],
)
def test_a_model_name_outside_the_price_table_is_a_warning(
    example: Path, name: str, hint: str
) -> None:
    _name(example, name)
    code, out, err = check(example)
    assert code == 0, out + err  # `run` serves it: a warning, not an error
    assert part(out, "model")[0] == f"name: {name}"
    assert part(out, "warnings") == [
        f"model.name: '{name}' is no model of the price table{hint}: a misspelt name is "
        "refused by the API at every turn; a model served elsewhere is not priced in "
        "`soulbot usage` (add it to model.prices)"
    ]


def test_no_key_and_no_base_url_is_an_error_naming_make_fake(example: Path) -> None:
    code, out, _ = check(example, ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    assert code == 1
    assert "API key: not set" in part(out, "model")
    assert part(out, "errors") == [
        "- model: no credentials: set ANTHROPIC_API_KEY (or model.api_key, or model.base_url "
        "for a gateway or local server) and start again; to try soulbot without a key, run "
        "`make fake` (a demo model on http://127.0.0.1:8765) and start with "
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=any"
    ]


async def test_online_says_who_answers_and_that_tools_work(example: Path) -> None:
    async with FakeAnthropic() as fake:
        fake.script_text("OK")
        fake.script_tool_use("report_ready", {"ready": True})
        code, out, err = await check_async(
            example, "--online", ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=KEY
        )
        requests = fake.requests
    assert code == 0, out + err
    assert part(out, "model")[3:] == [
        f"answered: claude-sonnet-4-6 at {fake.url}",
        "tool calls: work (a forced tool call came back as one)",
    ]
    assert [r["max_tokens"] for r in requests] == [1, 64]
    assert requests[1]["tool_choice"] == {"type": "tool", "name": "report_ready"}
    assert "KEEPTHISHIDDEN" not in out + err


async def test_online_warns_when_tool_calls_do_not_work(example: Path) -> None:
    async with FakeAnthropic() as fake:  # it answers a forced tool call with text
        code, out, err = await check_async(example, "--online", ANTHROPIC_BASE_URL=fake.url)
        assert len(fake.requests) == 2
    assert code == 0, out + err
    why = "it answered without the tool call (stop: end_turn)"
    assert part(out, "model")[-1] == f"tool calls: do not work ({why})"
    assert part(out, "warnings") == [
        f"model: tool calls do not work with claude-sonnet-4-6 at {fake.url} ({why}): the "
        "memory compile and the heartbeat need them and will fail (memory stays in unfiled "
        "notes, no soul writes itself); chat turns still work"
    ]


async def test_online_fails_when_the_model_does_not_answer(example: Path) -> None:
    _name(example, "claude-sonet-4-6")
    async with FakeAnthropic() as fake:
        fake.script_error(404, "not_found_error", "model: claude-sonet-4-6")
        code, out, _ = await check_async(example, "--online", ANTHROPIC_BASE_URL=fake.url)
        assert len(fake.requests) == 1  # no tool call after a failed first call
    assert code == 1
    [answered] = [line for line in part(out, "model") if line.startswith("answered:")]
    [error] = part(out, "errors")
    said = answered.removeprefix("answered: no (").removesuffix(")")
    assert said.startswith("NotFoundError: HTTP 404: ") and "claude-sonet-4-6" in said
    assert error == f"- model: claude-sonet-4-6 at {fake.url} did not answer: {said}"
    closed = closed_port_url()
    code, out, _ = await check_async(example, "--online", ANTHROPIC_BASE_URL=closed)
    assert code == 1
    [error] = part(out, "errors")  # one line, whatever the HTTP client's words
    assert error.startswith(f"- model: claude-sonet-4-6 at {closed} did not answer: ")
    assert "APIConnectionError: " in error


async def test_online_against_the_demo_model_of_make_fake(example: Path) -> None:
    with FakeProcess(demo=True) as demo:
        code, out, err = await check_async(
            example, "--online", ANTHROPIC_BASE_URL=demo.url, ANTHROPIC_API_KEY="any"
        )
    assert code == 0, out + err
    assert part(out, "model")[3:] == [
        f"answered: demo at {demo.url}",
        "tool calls: work (a forced tool call came back as one)",
    ]


# --- the heartbeat -------------------------------------------------------------------


def test_a_soul_whose_heartbeat_never_writes_soul_md_is_noted_with_why(example: Path) -> None:
    config = example / "soulbot.yaml"
    config.write_text(config.read_text().replace("default_soul: wren", "default_soul: twinkle"))
    code, out, err = check(example)
    assert code == 0, out + err
    assert part(out, "notes") == [
        "twinkle: its heartbeat never writes SOUL.md, which it does only from a group, "
        "channel or terminal conversation whose memory is shared; it answers in the terminal "
        "(memory auto), so each reflection goes to its conversation's own `self` page: set "
        "memory.scope: shared, or memory: shared on a binding of it, for it to write itself"
    ]
    config.write_text(config.read_text().replace("scope: auto", "scope: shared"))
    _, out, _ = check(example)
    assert "twinkle" not in "\n".join(part(out, "notes"))  # the terminal shares its wiki
    off = "  enabled: false\n  # A conversation"
    config.write_text(config.read_text().replace("  enabled: true\n  # A conversation", off))
    _, out, _ = check(example)
    assert part(out, "notes")[-1] == (
        "heartbeat.enabled is false: no soul reflects or writes its SOUL.md (souls with "
        "heartbeat regions: twinkle)"
    )


def test_a_daemon_serving_the_data_dir_is_a_warning(example: Path) -> None:
    """`run` refuses a second daemon on a data_dir; check, run beside the daemon before
    a restart, says so without failing (and without taking the daemon's lock)."""
    (example / "data").mkdir(mode=0o700)
    (example / "data" / "soulbot.pid").write_text(f"{os.getpid()}\n")  # a live process
    code, out, err = check(example)
    assert code == 0, out + err
    assert part(out, "warnings") == [
        f"data is in use by another soulbot (pid {os.getpid()}): stop it first, or give this "
        "one a data_dir of its own (`soulbot run` stops at once while it serves)"
    ]
    assert not (example / "data" / "soulbot.lock").exists()
    (example / "data" / "soulbot.pid").write_text("99999999\n")  # above any pid_max: no one
    _, out, _ = check(example)
    assert "warnings:" not in out


async def test_online_never_shows_the_key_a_server_echoes(example: Path) -> None:
    async with FakeAnthropic() as fake:
        fake.script_error(401, "authentication_error", f"invalid x-api-key: {KEY}")
        code, out, err = await check_async(
            example, "--online", ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=KEY
        )
    assert code == 1
    assert "KEEPTHISHIDDEN" not in out + err
    assert "invalid x-api-key: [key]" in part(out, "errors")[0]
