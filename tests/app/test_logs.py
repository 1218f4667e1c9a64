"""configure_logging: JSON lines, redaction, stdlib logging and warnings (docs/operations.md)."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import structlog
from _pytest.logging import LogCaptureHandler

from bot.app.logs import (
    LOG_FILE_NOTE,
    REDACTED,
    away_from_the_chat,
    configure_logging,
    default_format,
)
from bot.config.load import parse_config

SECRET = "123456789:AAH-telegram-SECRET-token-xyz"
API_KEY = "sk-ant-api03-VERYsecretKEY-0123456789"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """configure_logging rewires global state: put it back after each test."""
    root = logging.getLogger()
    # pytest's per-phase capture handlers come and go by themselves; keep the others.
    kept = [h for h in root.handlers if not isinstance(h, LogCaptureHandler)]
    level = root.level
    was_configured = structlog.is_configured()
    structlog_config = structlog.get_config()
    yield
    logging.captureWarnings(False)
    for handler in list(root.handlers):
        if isinstance(handler.formatter, structlog.stdlib.ProcessorFormatter):
            root.removeHandler(handler)
    for handler in kept:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    if was_configured:
        structlog.configure(**structlog_config)
    else:
        structlog.reset_defaults()


def setup(
    fmt: str = "json", level: str = "debug", secrets: tuple[str, ...] = (SECRET, API_KEY)
) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(fmt, level, secrets, stream)  # type: ignore[arg-type]
    return stream


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = stream.getvalue().splitlines()
    assert lines, "nothing was logged"
    return [json.loads(line) for line in lines]


def only_line(stream: io.StringIO) -> dict[str, Any]:
    (line,) = json_lines(stream)
    return line


# --- JSON lines ---------------------------------------------------------------------------


def test_json_lines_carry_event_level_and_a_utc_iso_timestamp() -> None:
    stream = setup()
    log = structlog.get_logger("soulbot.test")
    log.info("soul.loaded", soul="wren")
    log.warning("soul.warning", detail="x")
    log.error("soul.load_failed")
    logging.getLogger("telegram").warning("from the library")

    lines = json_lines(stream)
    assert [(line["event"], line["level"]) for line in lines] == [
        ("soul.loaded", "info"),
        ("soul.warning", "warning"),
        ("soul.load_failed", "error"),
        ("from the library", "warning"),
    ]
    assert lines[0]["soul"] == "wren"
    for line in lines:
        stamp = line["timestamp"]
        assert stamp.endswith("Z")
        parsed = datetime.fromisoformat(stamp)
        assert parsed.tzinfo is not None
        assert parsed.utcoffset() == timedelta(0)
        assert "T" in stamp


def test_reconfiguring_replaces_the_handler_instead_of_adding_one() -> None:
    first = setup()
    second = setup()
    structlog.get_logger().info("daemon.started")

    assert first.getvalue() == ""
    assert [line["event"] for line in json_lines(second)] == ["daemon.started"]


# --- redaction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["token", "api_key", "apikey", "authorization", "Authorization", "bot_token", "password"],
)
def test_secret_looking_keys_are_redacted(key: str) -> None:
    stream = setup(secrets=())
    structlog.get_logger().info("adapter.connected", **{key: "not-a-registered-value"})

    line = only_line(stream)
    assert line[key] == REDACTED
    assert "not-a-registered-value" not in stream.getvalue()


@pytest.mark.parametrize(
    "key",
    [
        "max_tokens",
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "daily_tokens_per_user",
    ],
)
def test_keys_that_merely_contain_token_are_kept(key: str) -> None:
    stream = setup()
    structlog.get_logger().info("llm.usage", **{key: 1234})

    assert only_line(stream)[key] == 1234


def test_secret_keys_inside_nested_values_are_redacted() -> None:
    stream = setup(secrets=())
    structlog.get_logger().info(
        "adapter.error",
        request={"headers": {"Authorization": "Bearer abc"}, "max_tokens": 5},
        items=[{"api_key": "k-123"}],
    )

    line = only_line(stream)
    assert line["request"] == {"headers": {"Authorization": REDACTED}, "max_tokens": 5}
    assert line["items"] == [{"api_key": REDACTED}]


def test_a_registered_secret_inside_another_string_is_redacted() -> None:
    stream = setup()
    structlog.get_logger().warning(
        "adapter.error",
        url=f"http://x/bot{SECRET}/getMe",
        detail=["first", f"key={API_KEY};"],
    )

    line = only_line(stream)
    assert line["url"] == f"http://x/bot{REDACTED}/getMe"
    assert line["detail"] == ["first", f"key={REDACTED};"]
    assert SECRET not in stream.getvalue()
    assert API_KEY not in stream.getvalue()


def test_the_password_of_a_url_is_redacted_though_unknown_and_the_url_invalid() -> None:
    stream = setup(secrets=())
    cannot = 'missing "]" in URI: "postgresql://bob:hunter2 secret@[::1/souls"'
    structlog.get_logger().error("adapter.error", error=cannot, detail=[f"at {cannot}"])
    logging.getLogger("psycopg").warning("connecting to postgres://amy:s3cr3t@db/x?sslmode=a")
    structlog.get_logger().info("store.opened", dsn="host=db password=pw-in-conninfo user=bob")

    cut, library, conninfo = json_lines(stream)
    assert cut["error"] == 'missing "]" in URI: "postgresql://bob:***@[::1/souls"'
    assert cut["detail"] == [f"at {cut['error']}"]
    assert library["event"] == "connecting to postgres://amy:***@db/x?sslmode=a"
    assert conninfo["dsn"] == "host=db password=*** user=bob"
    assert not {"hunter2", "s3cr3t", "pw-in-conninfo"} & set(stream.getvalue().split())


def test_a_registered_secret_in_the_event_name_is_redacted() -> None:
    stream = setup()
    structlog.get_logger().info(f"GET http://x/bot{SECRET}/getUpdates")

    assert only_line(stream)["event"] == f"GET http://x/bot{REDACTED}/getUpdates"


def test_a_token_with_an_env_files_newline_is_redacted_at_debug_level() -> None:
    config = parse_config(
        'adapters: {telegram: {token: "${TELEGRAM_TOKEN}"}}',
        "soulbot.yaml",
        {"TELEGRAM_TOKEN": SECRET + " \n"},
    )
    stream = setup(secrets=tuple(config.secrets()))
    token = config.adapters.telegram.token.get_secret_value()
    structlog.get_logger().debug("http.request", url=f"https://api.telegram.org/bot{token}/getMe")
    logging.getLogger("httpx").debug("POST %s", f"https://x/?t={quote(token, safe='')}")

    assert token == SECRET
    assert SECRET not in stream.getvalue()
    assert quote(SECRET, safe="") not in stream.getvalue()
    assert [line["url"] for line in json_lines(stream)[:1]] == [
        f"https://api.telegram.org/bot{REDACTED}/getMe"
    ]


def test_short_registered_values_are_not_redacted() -> None:
    # A short "secret" would blank ordinary words all over the log.
    stream = setup(secrets=("info", "wren"))
    structlog.get_logger().info("soul.loaded", soul="wren")

    line = only_line(stream)
    assert line["soul"] == "wren"
    assert line["level"] == "info"


def _raise_with_secret() -> None:
    raise RuntimeError(f"POST http://x/bot{SECRET}/sendMessage failed")


def test_a_secret_in_a_traceback_is_redacted() -> None:
    stream = setup()
    try:
        _raise_with_secret()
    except RuntimeError:
        structlog.get_logger().exception("turn.failed")

    line = only_line(stream)
    assert line["level"] == "error"
    assert "Traceback (most recent call last)" in line["exception"]
    assert f"RuntimeError: POST http://x/bot{REDACTED}/sendMessage failed" in line["exception"]
    assert SECRET not in stream.getvalue()


def test_a_secret_in_a_stdlib_traceback_is_redacted() -> None:
    stream = setup()
    try:
        _raise_with_secret()
    except RuntimeError:
        logging.getLogger("telegram.ext").exception("Error while getting Updates")

    line = only_line(stream)
    assert line["logger"] == "telegram.ext"
    assert f"bot{REDACTED}/sendMessage" in line["exception"]
    assert SECRET not in stream.getvalue()


def test_a_secret_in_a_traceback_is_redacted_in_console_format() -> None:
    stream = setup("console")
    try:
        _raise_with_secret()
    except RuntimeError:
        structlog.get_logger().exception("turn.failed")

    output = stream.getvalue()
    assert "turn.failed" in output
    assert f"RuntimeError: POST http://x/bot{REDACTED}/sendMessage failed" in output
    assert SECRET not in output


def test_a_secret_inside_a_logged_exception_object_is_redacted() -> None:
    stream = setup()
    structlog.get_logger().error("adapter.error", error=RuntimeError(f"bot{SECRET}/getMe"))

    line = only_line(stream)
    assert line["event"] == "adapter.error"
    assert line["error"] == f"RuntimeError('bot{REDACTED}/getMe')"
    assert SECRET not in stream.getvalue()


# --- stdlib logging and warnings ----------------------------------------------------------


def test_stdlib_logging_comes_out_as_json_through_the_same_stream() -> None:
    stream = setup()
    logging.getLogger("telegram").warning("retrying %s in %d s", f"http://x/bot{SECRET}/", 3)

    line = only_line(stream)
    assert line["event"] == f"retrying http://x/bot{REDACTED}/ in 3 s"
    assert line["level"] == "warning"
    assert line["logger"] == "telegram"
    assert datetime.fromisoformat(line["timestamp"]).utcoffset() == timedelta(0)


def test_python_warnings_come_out_as_json_through_the_same_stream() -> None:
    stream = setup()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("old_api is deprecated", DeprecationWarning, stacklevel=1)

    line = only_line(stream)
    assert "DeprecationWarning: old_api is deprecated" in line["event"]
    assert not line["event"].endswith("\n")
    assert line["event"] == line["event"].rstrip()
    assert line["level"] == "warning"
    assert line["logger"] == "py.warnings"


# --- console format and levels ------------------------------------------------------------


def test_console_format_is_readable_text_with_the_event_name() -> None:
    stream = setup("console")
    structlog.get_logger().info("soul.loaded", soul="wren", token="abc-def-ghi")
    logging.getLogger("discord").warning("gateway closed")

    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    for text in lines:
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
    assert "soul.loaded" in lines[0]
    assert "soul=wren" in lines[0]
    assert f"token={REDACTED}" in lines[0]
    assert "abc-def-ghi" not in stream.getvalue()
    assert "gateway closed" in lines[1]


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_level_filtering_drops_lower_levels(fmt: str) -> None:
    stream = setup(fmt, level="warning")
    log = structlog.get_logger()
    log.debug("dropped.debug")
    log.info("dropped.info")
    logging.getLogger("httpx").info("dropped.stdlib")
    log.warning("kept.warning")
    log.error("kept.error")

    output = stream.getvalue()
    assert "dropped" not in output
    assert "kept.warning" in output
    assert "kept.error" in output
    assert len(output.splitlines()) == 2


def test_info_level_keeps_info_and_drops_debug() -> None:
    stream = setup(level="info")
    log = structlog.get_logger()
    log.debug("dropped.debug")
    log.info("kept.info")

    assert [line["event"] for line in json_lines(stream)] == ["kept.info"]


# --- default_format -----------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_default_format_is_json_for_a_non_tty_stream() -> None:
    assert default_format(io.StringIO()) == "json"


def test_default_format_is_console_for_a_terminal() -> None:
    assert default_format(_Terminal()) == "console"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_while_the_chat_runs_the_log_goes_to_a_file(tmp_path: Path) -> None:
    """Not into the terminal the chat is on: to the file, JSON lines at the level
    given, every line (a failed turn's of the console too), redacted; one line on
    the terminal says where; the set-up before comes back at the end."""
    terminal = _Terminal()
    configure_logging("console", "warning", (), terminal, chat=True)
    path = tmp_path / "data" / "logs" / "soulbot.log"
    log = structlog.get_logger("t")
    with away_from_the_chat(path, "info", (API_KEY,)) as where:
        log.info("turn.started", session="console:me")
        log.warning("turn.failed", session="console:me", error=f"refused for {API_KEY}")
        logging.getLogger("lib").error("a library's line")
    log.error("after.chat")
    assert where == path.absolute()
    assert terminal.getvalue().splitlines()[0] == LOG_FILE_NOTE.format(path=where)
    assert "after.chat" in terminal.getvalue()  # the terminal's again
    assert "turn." not in terminal.getvalue()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["turn.started", "turn.failed", "a library's line"]
    assert lines[1]["error"] == f"refused for {REDACTED}"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_a_log_that_goes_to_no_terminal_stays_where_it_goes(tmp_path: Path) -> None:
    """`2>chat.log`, a pipe, journald: the operator chose; no file, no note."""
    stream = setup("json", "info")
    path = tmp_path / "logs" / "soulbot.log"
    with away_from_the_chat(path, "info", ()) as where:
        structlog.get_logger("t").info("turn.started")
    assert where is None
    assert not path.exists()
    assert [line["event"] for line in json_lines(stream)] == ["turn.started"]


def test_a_log_file_that_cannot_be_opened_leaves_the_log_on_the_terminal(tmp_path: Path) -> None:
    terminal = _Terminal()
    configure_logging("console", "warning", (), terminal, chat=True)
    (tmp_path / "logs").write_text("a file where the folder must be")
    with away_from_the_chat(tmp_path / "logs" / "soulbot.log", "info", ()) as where:
        structlog.get_logger("t").error("still.here")
    assert where is None
    assert "logs.file_failed" in terminal.getvalue()
    assert "still.here" in terminal.getvalue()
