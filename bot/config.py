"""soulbot.yaml -> typed, frozen config objects.

Every string value may hold `${NAME}` or `${NAME:-default}` (the default when
NAME is unset or empty), taken from the environment; `$$` writes a literal `$`.
Unknown keys, wrong types and missing values are a `ConfigError` naming the file
and the key path. `model.api_key` and `model.base_url` default to the
ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL variables. Secret values
(`model.api_key`, the adapter tokens) are `SecretStr`: they print as
`**********` and never appear in an error. Relative paths are relative to the
working directory soulbot starts in.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from apscheduler.triggers.cron import CronTrigger
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bot.errors import ConfigError
from bot.soul.heartbeat import DEFAULT_EMPTY_PHRASES
from bot.text import decode_text
from bot.validation import format_errors, key_path
from bot.yamlfile import load_yaml

DmPolicy = Literal["open", "allowlist", "pairing"]
GroupRule = Literal["mention", "always"]
MemoryScope = Literal["auto", "shared", "per-user", "per-chat"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _empty_is_none(value: Any) -> Any:
    return None if value == "" else value


def _check_url(value: str | None) -> str | None:
    if value is not None and not re.match(r"^https?://[^\s/]+", value):
        raise ValueError("expected an http:// or https:// URL")
    return value


class Price(_Section):
    """US dollars per million tokens; cache writes default to 1.25 x input (the
    5-minute cache) and cache reads to 0.1 x input."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _cache_rates(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("input"), int | float):
            data = {"cache_write": data["input"] * 1.25, "cache_read": data["input"] * 0.1, **data}
        return data


class ModelConfig(_Section):
    """The model client (`model:`)."""

    provider: Literal["anthropic"] = "anthropic"
    name: str = Field("claude-sonnet-4-6", min_length=1)
    api_key: SecretStr = SecretStr("")
    base_url: str | None = None
    max_tokens: int = Field(1024, ge=1)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0)
    max_concurrency: int = Field(8, ge=1)
    tool_rounds: int = Field(4, ge=1)
    prices: dict[str, Price] = {}

    _blank_url = field_validator("base_url", mode="before")(_empty_is_none)
    _url = field_validator("base_url")(_check_url)

    @field_validator("prices")
    @classmethod
    def _model_names(cls, value: dict[str, Price]) -> dict[str, Price]:
        if any(not name.strip() for name in value):
            raise ValueError("expected model names (or name prefixes) as keys, not an empty one")
        return value


class CompileConfig(_Section):
    """When the memory wiki is compiled (`memory.compile:`)."""

    cron: str = "0 3 * * *"
    timezone: str = "UTC"
    shutdown_wait_s: float = Field(5.0, ge=0)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError("expected an IANA time zone such as UTC or Europe/Lisbon") from None
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            CronTrigger.from_crontab(value, timezone="UTC")
        except ValueError:
            raise ValueError(
                "expected a crontab line of five fields (minute hour day month weekday)"
            ) from None
        return value


class MemoryConfig(_Section):
    """Long-term memory (`memory:`)."""

    scope: MemoryScope = "auto"
    recall_token_budget: int = Field(600, ge=0)
    history_token_budget: int = Field(6000, ge=256)
    compile: CompileConfig = CompileConfig()


class HeartbeatConfig(_Section):
    """The heartbeat of souls whose SOUL.md has regions (`heartbeat:`)."""

    enabled: bool = True
    idle_minutes: float = Field(30.0, gt=0)
    empty_phrases: tuple[str, ...] = DEFAULT_EMPTY_PHRASES


class BudgetConfig(_Section):
    """Daily token budgets (`budget:`); null means no limit."""

    daily_tokens_per_soul: int | None = Field(2_000_000, ge=0)
    daily_tokens_per_user: int | None = Field(200_000, ge=0)


class AdminsConfig(_Section):
    """Platform user ids allowed to run admin commands (`admins:`)."""

    discord: tuple[int, ...] = ()
    telegram: tuple[int, ...] = ()


def _on_off_auto(value: Any) -> Any:
    if isinstance(value, bool) or value == "auto":
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise PydanticCustomError("on_off_auto", "expected true, false or auto")


class ConsoleConfig(_Section):
    """The terminal chat (`adapters.console:`); `auto` is on when no platform has a token."""

    enabled: Annotated[bool | Literal["auto"], BeforeValidator(_on_off_auto)] = "auto"


class DiscordConfig(_Section):
    """The Discord adapter (`adapters.discord:`); on when `token` is set."""

    token: SecretStr = SecretStr("")
    guilds: GroupRule = "mention"
    dm_policy: DmPolicy = "pairing"
    allowlist: tuple[int, ...] = ()
    command_prefix: str = Field("!", min_length=1)
    api_base_url: str | None = None
    gateway_url: str | None = None

    _blank = field_validator("api_base_url", "gateway_url", mode="before")(_empty_is_none)

    @field_validator("api_base_url", "gateway_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|wss?)://[^\s/]+", value):
            raise ValueError("expected an http(s):// or ws(s):// URL")
        return value


class TelegramConfig(_Section):
    """The Telegram adapter (`adapters.telegram:`); on when `token` is set."""

    token: SecretStr = SecretStr("")
    groups: GroupRule = "mention"
    dm_policy: DmPolicy = "pairing"
    allowlist: tuple[int, ...] = ()
    base_url: str | None = None

    _blank_url = field_validator("base_url", mode="before")(_empty_is_none)
    _url = field_validator("base_url")(_check_url)


class AdaptersConfig(_Section):
    """The platforms (`adapters:`)."""

    console: ConsoleConfig = ConsoleConfig()
    discord: DiscordConfig = DiscordConfig()
    telegram: TelegramConfig = TelegramConfig()


class Binding(_Section):
    """Which soul answers where (`bindings:` entries; the first match wins)."""

    platform: Literal["discord", "telegram", "console"]
    soul: str = Field(min_length=1)
    guild: int | None = None
    channel: int | None = None
    chat: int | None = None
    memory: MemoryScope | None = None
    respond: GroupRule | None = None


class Config(_Section):
    """The whole of soulbot.yaml."""

    workspaces: Path = Path("workspaces")
    data_dir: Path = Path("data")
    default_soul: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    model: ModelConfig = ModelConfig()
    memory: MemoryConfig = MemoryConfig()
    budget: BudgetConfig = BudgetConfig()
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    admins: AdminsConfig = AdminsConfig()
    adapters: AdaptersConfig = AdaptersConfig()
    bindings: tuple[Binding, ...] = ()

    _blank_soul = field_validator("default_soul", mode="before")(_empty_is_none)

    def secrets(self) -> list[str]:
        """The secret values that are set, for the log redactor."""
        values = (self.model.api_key, self.adapters.discord.token, self.adapters.telegram.token)
        return [v.get_secret_value() for v in values if v.get_secret_value()]


_MODEL_ENV = {"api_key": "ANTHROPIC_API_KEY", "base_url": "ANTHROPIC_BASE_URL"}
_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}|\$\{")


def _interpolate(
    node: Any, environ: Mapping[str, str], loc: tuple[int | str, ...], errors: dict[str, str]
) -> Any:
    """`node` with every reference replaced; a bad reference adds an entry to
    `errors` (key path -> message)."""
    if isinstance(node, dict):
        return {k: _interpolate(v, environ, (*loc, str(k)), errors) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, environ, (*loc, i), errors) for i, v in enumerate(node)]
    if not isinstance(node, str) or "$" not in node:
        return node

    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$$":
            return "$"
        name = match.group(1)
        if name is None:
            errors[key_path(loc)] = "malformed ${...} reference; write ${NAME} or ${NAME:-default}"
            return ""
        if environ.get(name):
            return environ[name]
        if match.group(2) is not None:  # as in the shell: unset or empty takes the default
            return match.group(3)
        if name in environ:
            return ""
        errors[key_path(loc)] = (
            f"environment variable {name} is not set (write ${{{name}:-}} to allow it to be empty)"
        )
        return ""

    return _REFERENCE.sub(substitute, node)


def parse_config(text: str, source: str, environ: Mapping[str, str]) -> Config:
    """Parse YAML text into a Config; `source` names the file in errors.

    Raises ConfigError with one line per problem.
    """
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}{where}: invalid YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level")
    unresolved: dict[str, str] = {}
    data = _interpolate(raw, environ, (), unresolved)
    model = data.setdefault("model", {})
    if isinstance(model, dict):  # the SDK's own variables, when the file names none
        for key, variable in _MODEL_ENV.items():
            if key not in model and environ.get(variable):
                model[key] = environ[variable]
    lines = [f"{path}: {message}" for path, message in unresolved.items()]
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        # A value that could not be interpolated is reported once, above.
        lines.extend(format_errors(exc, Config, skip=unresolved.keys()))
    if lines:
        raise ConfigError("\n".join(f"{source}: {line}" for line in lines))
    return config


def load_config(path: Path | None, environ: Mapping[str, str]) -> Config:
    """Read the config file at `path`; `None` gives the defaults.

    Raises ConfigError when the file is missing, unreadable or invalid.
    """
    if path is None:
        return parse_config("", "(defaults)", environ)
    try:
        text = decode_text(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (bad byte at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    return parse_config(text, str(path), environ)
