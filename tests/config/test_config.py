"""soulbot.yaml: parse_config / load_config behaviour (docs/commands.md)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, SecretStr, ValidationError

from bot.config.load import load_config, parse_config
from bot.config.notes import scope_notes
from bot.config.schema import Config
from bot.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "soulbot.example.yaml"
SOURCE = "soulbot.yaml"

API_KEY = "sk-ant-api03-VERYsecretKEY-0123456789"
TG_TOKEN = "123456789:AAH-telegram-SECRET-token-xyz"
DC_TOKEN = "MTIzNDU2.discord-SECRET-token.abcdefgh"


def parse(text: str, environ: Mapping[str, str] | None = None) -> Config:
    return parse_config(text, SOURCE, environ or {})


def error_of(text: str, environ: Mapping[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, environ)
    return str(info.value)


def error_lines(text: str, environ: Mapping[str, str] | None = None) -> list[str]:
    return error_of(text, environ).splitlines()


# --- defaults and the example file -------------------------------------------------------


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "\n\n"])
def test_empty_text_gives_the_defaults(text: str) -> None:
    config = parse(text)

    assert config == Config()
    assert config.workspaces == Path("workspaces")
    assert config.data_dir == Path("data")
    assert config.default_soul is None
    assert config.log_level == "info"
    assert config.model.provider == "anthropic"
    assert config.model.name == "claude-sonnet-4-6"
    assert config.model.max_tokens == 1024
    assert config.model.max_concurrency == 8
    assert config.model.base_url is None
    assert config.memory.scope == "auto"
    assert config.memory.compile.cron == "0 3 * * *"
    assert config.memory.compile.timezone == "UTC"
    assert config.budget.daily_tokens_per_soul == 2_000_000
    assert config.budget.daily_tokens_per_user == 200_000
    assert config.admins.discord == ()
    assert config.adapters.console.enabled == "auto"
    assert config.adapters.telegram.dm_policy == "pairing"
    assert config.adapters.discord.command_prefix == "!"
    assert config.bindings == ()
    assert config.secrets() == []


def test_load_config_without_a_path_gives_the_defaults() -> None:
    assert load_config(None, {}) == Config()


def test_example_config_loads_with_an_empty_environ() -> None:
    config = load_config(EXAMPLE, {})

    assert config.default_soul == "wren"
    # `${X:-}` with X unset is empty, and an empty URL means "the default endpoint".
    assert config.model.base_url is None
    assert config.adapters.telegram.base_url is None
    assert config.adapters.discord.api_base_url is None
    assert config.adapters.discord.gateway_url is None
    assert config.secrets() == []


def test_example_config_takes_its_secrets_and_urls_from_the_environ() -> None:
    environ = {
        "ANTHROPIC_API_KEY": API_KEY,
        "TELEGRAM_TOKEN": TG_TOKEN,
        "DISCORD_TOKEN": DC_TOKEN,
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080",
        "TELEGRAM_BASE_URL": "http://127.0.0.1:8081/bot",
        "DISCORD_GATEWAY_URL": "ws://127.0.0.1:9000",
    }
    config = load_config(EXAMPLE, environ)

    assert config.model.api_key.get_secret_value() == API_KEY
    assert config.adapters.telegram.token.get_secret_value() == TG_TOKEN
    assert config.adapters.discord.token.get_secret_value() == DC_TOKEN
    assert config.model.base_url == "http://127.0.0.1:8080"
    assert config.adapters.telegram.base_url == "http://127.0.0.1:8081/bot"
    assert config.adapters.discord.gateway_url == "ws://127.0.0.1:9000"
    assert sorted(config.secrets()) == sorted([API_KEY, TG_TOKEN, DC_TOKEN])


def _schema_leaves(
    node: Mapping[str, Any], model: type[BaseModel], path: str
) -> list[tuple[str, Any]]:
    """(key path, YAML value) of every leaf, asserting each key is a field of `model`."""
    leaves: list[tuple[str, Any]] = []
    for key, value in node.items():
        where = f"{path}.{key}" if path else key
        assert key in model.model_fields, f"{where} is not in the schema"
        annotation = model.model_fields[key].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            assert isinstance(value, dict), f"{where} should be a mapping"
            leaves.extend(_schema_leaves(value, annotation, where))
        else:
            leaves.append((where, value))
    return leaves


def _value_at(config: Config, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_every_key_of_the_example_is_in_the_schema_with_the_value_it_sets() -> None:
    raw = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    config = load_config(EXAMPLE, {})

    leaves = _schema_leaves(raw, Config, "")
    assert len(leaves) > 25  # the example documents (nearly) every key

    for path, expected in leaves:
        actual = _value_at(config, path)
        if isinstance(expected, str) and "${" in expected:
            continue  # interpolated; covered by the environ tests
        if isinstance(actual, SecretStr):
            actual = actual.get_secret_value()
        if isinstance(actual, Path):
            expected = Path(expected)
        if isinstance(expected, list):
            expected = tuple(expected)
        assert actual == expected, path


# --- ${NAME} interpolation ----------------------------------------------------------------


def _model_name(config: Config) -> Any:
    return config.model.name


def _base_url(config: Config) -> Any:
    return config.model.base_url


def _admins_discord(config: Config) -> Any:
    return config.admins.discord


def _max_tokens(config: Config) -> Any:
    return config.model.max_tokens


@pytest.mark.parametrize(
    ("text", "environ", "read", "expected"),
    [
        ("model: {name: '${N}'}", {"N": "claude-x"}, _model_name, "claude-x"),
        ("model: {name: '${N:-fallback}'}", {}, _model_name, "fallback"),
        ("model: {name: '${N:-fallback}'}", {"N": "from-env"}, _model_name, "from-env"),
        ("model: {name: 'pre-${A}-${B:-b}-post'}", {"A": "a"}, _model_name, "pre-a-b-post"),
        ("model: {name: 'a-${N:-x:y/z}'}", {}, _model_name, "a-x:y/z"),
        # `$$` escapes: `$${N}` is the literal text `${N}`, not a reference.
        ("model: {name: '$${N}'}", {"N": "nope"}, _model_name, "${N}"),
        # An env value is taken as is, not interpolated again.
        ("model: {name: '${N}'}", {"N": "${OTHER}"}, _model_name, "${OTHER}"),
        # A lone `$` is not a reference.
        ("model: {name: 'cost$5'}", {}, _model_name, "cost$5"),
        ("model: {base_url: '${U:-}'}", {}, _base_url, None),
        ("model: {base_url: '${U:-http://proxy:1}'}", {}, _base_url, "http://proxy:1"),
        ("admins: {discord: ['${A}', 2, '${B:-3}']}", {"A": "1"}, _admins_discord, (1, 2, 3)),
        ("model: {max_tokens: '${M:-99}'}", {}, _max_tokens, 99),
        ("model: {max_tokens: '${M:-99}'}", {"M": "512"}, _max_tokens, 512),
    ],
)
def test_interpolation(
    text: str, environ: dict[str, str], read: Callable[[Config], Any], expected: Any
) -> None:
    value = read(parse(text, environ))
    assert value == expected
    assert type(value) is type(expected)


def test_interpolation_reaches_mappings_inside_lists() -> None:
    text = """
bindings:
  - {platform: '${P:-telegram}', soul: '${S}', chat: '${C:-5}', memory: per-user}
memory:
  compile: {cron: '${CRON:-0 4 * * *}', timezone: '${TZ}'}
"""
    config = parse(text, {"S": "wren", "TZ": "Europe/Lisbon"})

    (binding,) = config.bindings
    assert binding.platform == "telegram"
    assert binding.soul == "wren"
    assert binding.chat == 5
    assert config.memory.compile.cron == "0 4 * * *"
    assert config.memory.compile.timezone == "Europe/Lisbon"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("model: {name: '${NAME}'}", "model.name: environment variable NAME is not set"),
        ("admins: {discord: [1, '${ADMIN}']}", "admins.discord[1]: environment variable ADMIN"),
        (
            "bindings: [{platform: discord, soul: '${SOUL}'}]",
            "bindings[0].soul: environment variable SOUL is not set",
        ),
        (
            "memory: {compile: {timezone: '${ZONE}'}}",
            "memory.compile.timezone: environment variable ZONE is not set",
        ),
    ],
)
def test_unset_variable_without_default_is_an_error_naming_key_and_variable(
    text: str, line: str
) -> None:
    message = error_of(text, {"UNRELATED": "x"})
    assert f"{SOURCE}: {line}" in message
    assert "${" in message  # tells how to allow an empty value


@pytest.mark.parametrize("value", ["${NAME", "${}", "${1NAME}", "${NAME-x}", "abc ${ def"])
def test_malformed_reference_is_an_error(value: str) -> None:
    message = error_of(f"default_soul: '{value}'", {"NAME": "wren"})
    assert f"{SOURCE}: default_soul: malformed ${{...}} reference" in message


def test_default_applies_when_the_variable_is_set_but_empty() -> None:
    config = parse(
        "model: {name: '${MODEL:-claude-x}', max_tokens: '${M:-99}'}", {"MODEL": "", "M": ""}
    )
    assert config.model.name == "claude-x"
    assert config.model.max_tokens == 99


def test_unset_variable_is_reported_once() -> None:
    lines = error_lines("model: {max_tokens: '${M}'}")
    assert lines == [
        f"{SOURCE}: model.max_tokens: environment variable M is not set "
        "(write ${M:-} to allow it to be empty)"
    ]


# --- errors name the file, the key path and what was expected ------------------------------


def test_the_documented_dm_policy_error_line() -> None:
    message = error_of("adapters:\n  telegram:\n    dm_policy: anyone\n")
    assert (
        "soulbot.yaml: adapters.telegram.dm_policy: expected one of open, allowlist, pairing, "
        "got 'anyone'"
    ) in message


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # unknown keys, with a hint for a near miss only
        (
            "adapters: {telegram: {tokn: x}}",
            "adapters.telegram.tokn: unknown key (did you mean 'token'?)",
        ),
        ("modl: {name: x}", "modl: unknown key (did you mean 'model'?)"),
        ("memory: {compile: {crn: x}}", "memory.compile.crn: unknown key (did you mean 'cron'?)"),
        ("zzzqqq: 1", "zzzqqq: unknown key"),
        # wrong types
        ("model: {max_tokens: abc}", "model.max_tokens: expected an integer, got 'abc'"),
        ("model: {max_tokens: 1.5}", "model.max_tokens: expected an integer, got 1.5"),
        (
            "memory: {compile: {shutdown_wait_s: soon}}",
            "memory.compile.shutdown_wait_s: expected a number, got 'soon'",
        ),
        ("admins: {discord: [abc]}", "admins.discord[0]: expected an integer, got 'abc'"),
        ("model: [1, 2]", "model: expected a mapping, got a list"),
        ("adapters: {telegram: [1]}", "adapters.telegram: expected a mapping, got a list"),
        ("bindings: {platform: discord}", "bindings: expected a list, got a mapping"),
        ("admins: {telegram: {id: 1}}", "admins.telegram: expected a list, got a mapping"),
        ("log_level: loud", "log_level: expected one of debug, info, warning, error, got 'loud'"),
        # missing required values
        ("bindings: [{platform: discord}]", "bindings[0].soul: a value is required"),
        ("bindings: [{soul: wren}]", "bindings[0].platform: a value is required"),
        # value checks
        ("memory: {compile: {cron: 'bad cron'}}", "memory.compile.cron: expected a crontab line"),
        ("memory: {compile: {cron: '0 3 * *'}}", "memory.compile.cron: expected a crontab line"),
        ("memory: {compile: {cron: '61 3 * * *'}}", "memory.compile.cron: expected a crontab"),
        (
            "memory: {compile: {timezone: Mars/Olympus}}",
            "memory.compile.timezone: expected an IANA time zone such as UTC or Europe/Lisbon, "
            "got 'Mars/Olympus'",
        ),
        (
            "model: {base_url: 'ftp://x'}",
            "model.base_url: expected an http:// or https:// URL, got 'ftp://x'",
        ),
        ("adapters: {telegram: {base_url: 'localhost:8081'}}", "adapters.telegram.base_url: exp"),
        (
            "adapters: {discord: {gateway_url: 'ftp://x'}}",
            "adapters.discord.gateway_url: expected an http(s):// or ws(s):// URL",
        ),
        ("model: {max_tokens: -5}", "model.max_tokens: expected a value >= 1, got -5"),
        ("model: {max_tokens: 0}", "model.max_tokens: expected a value >= 1, got 0"),
        ("budget: {daily_tokens_per_user: -1}", "budget.daily_tokens_per_user: expected a value"),
    ],
)
def test_error_names_the_key_path_and_what_was_expected(text: str, line: str) -> None:
    lines = error_lines(text)
    assert any(candidate.startswith(f"{SOURCE}: {line}") for candidate in lines), lines
    assert all(candidate.startswith(f"{SOURCE}: ") for candidate in lines), lines


def test_a_far_off_unknown_key_gets_no_hint() -> None:
    assert "did you mean" not in error_of("zzzqqq: 1")


def test_every_error_is_reported_at_once() -> None:
    text = """
log_level: loud
model:
  max_tokens: -5
  nmae: x
memory:
  compile: {timezone: Nowhere/Land}
adapters:
  telegram: {dm_policy: anyone}
bindings:
  - {platform: discord}
"""
    lines = error_lines(text)

    assert len(lines) == 6, lines
    for path in (
        "log_level",
        "model.max_tokens",
        "model.nmae",
        "memory.compile.timezone",
        "adapters.telegram.dm_policy",
        "bindings[0].soul",
    ):
        assert sum(line.startswith(f"{SOURCE}: {path}: ") for line in lines) == 1, path


def test_environment_and_schema_errors_are_reported_together() -> None:
    lines = error_lines("default_soul: '${SOUL}'\nlog_level: loud\n")
    assert any("default_soul: environment variable SOUL" in line for line in lines)
    assert any("log_level: expected one of" in line for line in lines)


def test_unknown_key_in_a_binding_gets_a_hint() -> None:
    message = error_of("bindings: [{platform: discord, soul: wren, chanel: 1}]")
    assert "bindings[0].chanel: unknown key (did you mean 'channel'?)" in message


def test_union_field_error_names_the_real_key_path() -> None:
    lines = error_lines("adapters: {console: {enabled: maybe}}")
    assert lines
    assert all(line.startswith(f"{SOURCE}: adapters.console.enabled: ") for line in lines), lines


def test_load_config_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "custom.yaml"
    path.write_text("model:\n  max_tokens: -1\n", encoding="utf-8")

    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert str(info.value) == f"{path}: model.max_tokens: expected a value >= 1, got -1"


# --- YAML and file problems ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("model:\n  name: x\n\tmax_tokens: 3\n", 3),
        ("model:\n  name: x\n  max_tokens: [1\nbudget: {}\n", 4),
        ("a: [\n", 2),
    ],
)
def test_yaml_syntax_error_names_the_line(text: str, line: int) -> None:
    message = error_of(text)
    assert message.startswith(f"{SOURCE} line {line}: invalid YAML: ")
    assert "\n" not in message or "a tab" in message  # plain words, then PyYAML's


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "42\n", "just a string\n", "[a, b]\n"])
def test_top_level_must_be_a_mapping(text: str) -> None:
    assert error_of(text) == f"{SOURCE}: expected a mapping of keys at the top level"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert str(info.value) == f"{path}: config file not found"


@pytest.mark.parametrize(
    ("data", "offset"),
    [
        (b"model:\n  name: caf\xe9\n", 18),
        # the offset counts from the start of the file, BOM included
        (b"\xef\xbb\xbfmodel:\n  name: caf\xe9\n", 21),
    ],
)
def test_invalid_utf8_is_a_config_error_naming_the_byte(
    tmp_path: Path, data: bytes, offset: int
) -> None:
    path = tmp_path / "soulbot.yaml"
    path.write_bytes(data)

    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "UTF-8" in message
    assert re.findall(r"\d+", message.removeprefix(str(path)).replace("UTF-8", "")) == [str(offset)]


def test_a_bom_at_the_start_of_the_file_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "soulbot.yaml"
    path.write_bytes("\ufeffdefault_soul: wren\nmodel: {max_tokens: 64}\n".encode())

    config = load_config(path, {})
    assert config.default_soul == "wren"
    assert config.model.max_tokens == 64


def test_a_directory_is_not_readable_as_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {})
    assert str(info.value).startswith(f"{tmp_path}: ")


# --- secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "adapters: {telegram: {token: [1, 2]}}",
        f"adapters: {{telegram: {{token: ['{TG_TOKEN}']}}}}",
        f"adapters: {{discord: {{token: {{value: '{DC_TOKEN}'}}}}}}",
        "model: {api_key: 918273645546372819}",
        f"model: {{api_key: ['{API_KEY}']}}",
    ],
)
def test_a_wrong_secret_value_is_named_but_not_shown(text: str) -> None:
    message = error_of(text)

    assert ": expected a string" in message
    assert "got" not in message
    for secret in (TG_TOKEN, DC_TOKEN, API_KEY, "918273645546372819"):
        assert secret not in message


def test_an_unknown_key_holding_a_secret_does_not_show_it() -> None:
    message = error_of(f"adapters: {{telegram: {{bot_token: '{TG_TOKEN}'}}}}")
    assert "adapters.telegram.bot_token: unknown key" in message
    assert TG_TOKEN not in message


@pytest.mark.parametrize("via_environ", [False, True])
def test_valid_secrets_stay_out_of_other_errors(via_environ: bool) -> None:
    environ = {"K": API_KEY, "T": TG_TOKEN, "D": DC_TOKEN}
    if via_environ:
        key, tg, dc = "${K}", "${T}", "${D}"
    else:
        key, tg, dc = API_KEY, TG_TOKEN, DC_TOKEN
    text = f"""
model: {{api_key: '{key}', max_tokens: lots}}
adapters:
  telegram: {{token: '{tg}', dm_policy: anyone, groups: never}}
  discord: {{token: '{dc}', tokn: x}}
"""
    message = error_of(text, environ)

    assert len(message.splitlines()) == 4
    assert "model.max_tokens: expected an integer, got 'lots'" in message
    for secret in (API_KEY, TG_TOKEN, DC_TOKEN):
        assert secret not in message


def test_secrets_never_appear_in_the_config_repr() -> None:
    text = f"""
model: {{api_key: '{API_KEY}'}}
adapters: {{telegram: {{token: '{TG_TOKEN}'}}, discord: {{token: '{DC_TOKEN}'}}}}
"""
    config = parse(text)
    renderings = [
        repr(config),
        str(config),
        repr(config.model),
        str(config.model),
        repr(config.adapters),
        str(config.adapters.telegram),
        f"{config.adapters.discord}",
        config.model_dump_json(),
    ]
    for rendering in renderings:
        for secret in (API_KEY, TG_TOKEN, DC_TOKEN):
            assert secret not in rendering
    assert "**********" in str(config.model)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        (f"adapters: {{telegram: {{token: '{TG_TOKEN}'}}}}", [TG_TOKEN]),
        (f"model: {{api_key: '{API_KEY}'}}\nadapters: {{discord: {{token: ''}}}}", [API_KEY]),
        (
            f"model: {{api_key: '{API_KEY}'}}\n"
            f"adapters: {{telegram: {{token: '{TG_TOKEN}'}}, discord: {{token: '{DC_TOKEN}'}}}}",
            [API_KEY, TG_TOKEN, DC_TOKEN],
        ),
    ],
)
def test_secrets_lists_the_ones_that_are_set(text: str, expected: list[str]) -> None:
    assert sorted(parse(text).secrets()) == sorted(expected)


def test_secrets_from_the_environ_are_listed() -> None:
    config = parse("model: {api_key: '${KEY:-}'}", {"KEY": API_KEY})
    assert config.secrets() == [API_KEY]


# --- frozen -------------------------------------------------------------------------------


def _config_itself(config: Config) -> Any:
    return config


def _model_section(config: Config) -> Any:
    return config.model


def _telegram_section(config: Config) -> Any:
    return config.adapters.telegram


def _compile_section(config: Config) -> Any:
    return config.memory.compile


def _first_binding(config: Config) -> Any:
    return config.bindings[0]


@pytest.mark.parametrize(
    ("target", "attribute", "value"),
    [
        (_config_itself, "default_soul", "other"),
        (_config_itself, "model", None),
        (_model_section, "max_tokens", 5),
        (_telegram_section, "token", SecretStr("x")),
        (_compile_section, "cron", "* * * * *"),
        (_first_binding, "soul", "other"),
    ],
)
def test_config_objects_are_frozen(
    target: Callable[[Config], Any], attribute: str, value: Any
) -> None:
    config = parse("default_soul: wren\nbindings: [{platform: console, soul: wren}]\n")
    section = target(config)
    before = getattr(section, attribute)

    with pytest.raises(ValidationError):
        setattr(section, attribute, value)
    assert getattr(section, attribute) == before


def test_config_lists_are_tuples() -> None:
    config = parse("admins: {discord: [1, 2]}\nbindings: [{platform: console, soul: wren}]\n")
    assert isinstance(config.admins.discord, tuple)
    assert isinstance(config.bindings, tuple)


def test_a_key_given_twice_is_an_error() -> None:
    message = error_of("model:\n  name: a\n  max_tokens: 5\n  name: b\n")
    assert message == f"{SOURCE} line 4: invalid YAML: the key 'name' is given twice"


def test_an_empty_variable_without_default_is_an_empty_value() -> None:
    config = parse("model: {api_key: '${K}'}\ndefault_soul: '${S}'", {"K": "", "S": ""})
    assert config.model.api_key.get_secret_value() == ""
    assert config.default_soul is None


def test_an_empty_model_name_speaks_our_language() -> None:
    assert f"{SOURCE}: model.name: expected a non-empty string, got ''" in error_of(
        "model: {name: ''}"
    )


def test_check_notes_say_what_per_user_and_shared_mean_where() -> None:
    config = parse_config(
        "memory: {scope: shared}\n"
        "bindings:\n"
        "  - {platform: telegram, soul: w, memory: per-user}\n"
        "  - {platform: console, soul: w, memory: shared}\n"
        "  - {platform: discord, soul: w}\n",
        "t",
        {},
    )
    notes = scope_notes(config)
    assert notes[0].startswith("memory.scope: memory shared: groups and channels share")
    assert notes[1].startswith("bindings[0] (telegram): memory per-user: each person's own")
    assert "in groups and channels it means the chat's own scope" in notes[1]
    assert notes[2].startswith("bindings[1] (console): memory shared: the terminal shares")
    assert len(notes) == 3
    assert scope_notes(parse_config("", "t", {})) == []


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("adapters: {telegram: {webhook: {url: 'http://bot.example.org/t', secret_token: s}}}",
         "adapters.telegram.webhook.url: expected an https:// URL"),
        ("adapters: {telegram: {webhook: {url: 'https://bot.example.org/t'}}}",
         "secret_token: required with url"),
        ("adapters: {discord: {shard_ids: [0]}}", "shard_ids: set shard_count too"),
        ("adapters: {discord: {shard_count: 2, shard_ids: [1, 2]}}",
         "shard_ids: each must be from 0 to 1"),
        ("instance: shards-0-1", "instance: needs a PostgreSQL store.url"),
        ("store: {url: 'mysql://db/x'}", "store.url: expected sqlite:///"),
    ],
)  # fmt: skip
def test_what_more_than_one_process_needs_is_checked(text: str, wanted: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "t.yaml", {})
    assert wanted in str(refused.value)


def test_the_settings_of_a_process_among_several_are_read() -> None:
    config = parse_config(
        "instance: shards-2-3\nstore: {url: 'postgresql://bot@db/souls'}\n"
        "adapters: {discord: {shard_count: 4, shard_ids: [2, 3]},"
        " telegram: {webhook: {url: 'https://bot.example.org/t', secret_token: s3cr-et_}}}",
        "t.yaml",
        {},
    )
    assert (config.instance, config.store.url) == ("shards-2-3", "postgresql://bot@db/souls")
    assert config.adapters.discord.shard_ids == (2, 3)
    assert "s3cr-et_" in config.secrets()  # the redactor knows the webhook's secret
