"""The config schema: soulbot.yaml as typed, frozen pydantic models (read by
bot/config/load.py). Field docstrings are the configuration reference. Secret values
(`model.api_key`, the adapter tokens) are `SecretStr`: they print as
`**********` and never appear in an error. Relative paths are relative to the
working directory soulbot starts in.
"""

from __future__ import annotations

import re
import zoneinfo
from pathlib import Path
from typing import Annotated, Any, Literal

from apscheduler.triggers.cron import CronTrigger
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bot.prompts import DEFAULT_EMPTY_PHRASES
from bot.storage.postgres import Timeouts, is_postgres

DmPolicy = Literal["open", "allowlist", "pairing"]
GroupRule = Literal["mention", "ambient", "always"]
MemoryScope = Literal["auto", "shared", "per-user", "per-chat", "per-member"]
VoiceReplies = Literal["off", "when-spoken-to", "always"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def _empty_is_none(value: Any) -> Any:
    return None if value == "" else value


def _check_url(value: str | None) -> str | None:
    if value is not None and not re.match(r"^https?://[^\s/]+", value):
        raise ValueError("expected an http:// or https:// URL")
    return value


def _check_url_or_empty(value: str) -> str:
    return _check_url(value or None) or ""


def _check_listen(value: str | None) -> str | None:
    if value is not None and not split_listen(value)[0]:
        raise ValueError("expected host:port with a host (127.0.0.1:9464, [::1]:9464)")
    return value


def split_listen(listen: str) -> tuple[str, int]:
    """The host and port of a `host:port` (IPv6 in brackets: `[::1]:9464`). Raises
    ValueError when it is not one (a port from 0, any free one, to 65535)."""
    host, colon, port = listen.strip().rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError("expected host:port with a port from 0 to 65535 (127.0.0.1:9464)")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _strip(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


# A key or token without the whitespace an env file or a paste leaves around it: sent
# with it, it fails; logged without it, the redactor would not know it.
Secret = Annotated[SecretStr, BeforeValidator(_strip)]
# The default of `souls.max_prompt_tokens`, for the soul registry built without a config.
MAX_PROMPT_TOKENS = 20_000


class Price(_Section):
    """US dollars per million tokens; cache writes default to 1.25 x input (the
    5-minute cache) and cache reads to 0.1 x input."""

    input: float = Field(ge=0)
    """US dollars per million input tokens."""
    output: float = Field(ge=0)
    """US dollars per million output tokens."""
    cache_write: float = Field(ge=0)
    """US dollars per million tokens written to the prompt cache (default: 1.25 x input)."""
    cache_read: float = Field(ge=0)
    """US dollars per million tokens read from the prompt cache (default: 0.1 x input)."""

    @model_validator(mode="before")
    @classmethod
    def _cache_rates(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("input"), int | float):
            data = {"cache_write": data["input"] * 1.25, "cache_read": data["input"] * 0.1, **data}
        return data


class ModelConfig(_Section):
    """The model client (`model:`)."""

    provider: Literal["anthropic"] = "anthropic"
    """The model provider; only `anthropic` for now."""
    name: str = Field("claude-sonnet-4-6", min_length=1)
    """The model name, a current Claude model."""
    api_key: Secret = SecretStr("")
    """The API key (default: `$ANTHROPIC_API_KEY`). `run` and `chat` need it or a `base_url`."""
    base_url: str | None = None
    """A proxy, gateway or compatible local server (default: `$ANTHROPIC_BASE_URL`)."""
    max_tokens: int = Field(1024, ge=1)
    """The longest reply, in tokens."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds one model request may take before it counts as a timeout."""
    max_retries: int = Field(2, ge=0)
    """Retries of a rate-limited, overloaded, failed or timed-out request (the SDK's back-off);
    after them the turn fails with a short apology."""
    max_concurrency: int = Field(8, ge=1)
    """Model calls in flight at once, across every session."""
    tool_rounds: int = Field(4, ge=1)
    """Model calls one turn may make while the model uses tools; the last may not call one."""
    prices: dict[str, Price] = {}
    """US dollars per million tokens by model name or name prefix (`{input, output}`, optional
    `cache_write`, `cache_read`); adds to or overrides the built-in table."""
    fallback: str | None = None
    """A model that answers when `name` is still overloaded, rate-limited, failing or timing out
    after its retries: the same request is sent to it once, without retries (`llm.fallback`),
    and ledgered under its name; `null`: none."""
    fallback_base_url: str | None = None
    """Where `fallback` is served, when not at `base_url` (another gateway or region; the same
    `api_key`); empty: `base_url`."""

    _blank = field_validator("base_url", "fallback", "fallback_base_url", mode="before")(
        _empty_is_none
    )
    _url = field_validator("base_url", "fallback_base_url")(_check_url)

    @field_validator("fallback_base_url")
    @classmethod
    def _fallback_named(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("fallback") is None:
            raise ValueError("expected `model.fallback` too (the model to ask there)")
        return value

    @field_validator("prices")
    @classmethod
    def _model_names(cls, value: dict[str, Price]) -> dict[str, Price]:
        if any(not name.strip() for name in value):
            raise ValueError("expected model names (or name prefixes) as keys, not an empty one")
        return value


class CompileConfig(_Section):
    """When the memory wiki is compiled (`memory.compile:`)."""

    cron: str = "0 3 * * *"
    """When the memory wikis are compiled: a crontab line (minute hour day month weekday)."""
    timezone: str = "UTC"
    """The IANA time zone of `cron`."""
    shutdown_wait_s: float = Field(5.0, ge=0)
    """On shutdown, seconds to wait for turns in flight and their memory writes; what is still
    running then is logged (`shutdown.pending`) and cancelled."""
    max_tokens: int = Field(4096, ge=256)
    """The longest answer of one compile call (filing notes on pages, a page's merge), in
    tokens. An answer that stops short of its end (this cap, a refusal) is a conflict: the page
    stays as it was and its notes wait for the next compile."""

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
    """Whose memory a group conversation reads and writes: `shared` (the soul's own wiki), the
    chat's own scope (`auto`, `per-chat`, and `per-user`, which in a group means the chat: a
    person's scope is read only in their DMs), or `per-member`: each member's own memory of
    the server (a Discord guild, a Telegram group), written from what they say in any of its
    channels and read only in their own turns there. A DM always keeps the person's own scope
    (only the console may be bound to `shared`), and a Discord private thread its own."""
    recall_token_budget: int = Field(600, ge=0)
    """Tokens of recalled memory added to each turn."""
    history_token_budget: int = Field(6000, ge=256)
    """Tokens of history kept per session; past it, the oldest half is compacted by the model into
    a summary."""
    page_max_tokens: int = Field(1500, ge=200)
    """The size cap of a wiki page, in tokens (characters / 4). The compile asks the model to
    keep a page under it; a page that is still over it has its oldest paragraphs moved to a
    linked `<page>/part-<n>` page."""
    compile: CompileConfig = CompileConfig()
    """When the memory wikis are compiled, and how large a compile's answers may be."""


class HeartbeatConfig(_Section):
    """The heartbeat of souls whose SOUL.md has regions (`heartbeat:`)."""

    enabled: bool = True
    """`false`: no soul reflects, whatever its SOUL.md holds."""
    idle_minutes: float = Field(30.0, gt=0)
    """A conversation ends after this many idle minutes (or a goodbye, or shutdown)."""
    empty_phrases: tuple[str, ...] = DEFAULT_EMPTY_PHRASES
    """Reflections containing one of these (any case) are rejected as empty boilerplate."""


class BudgetConfig(_Section):
    """Daily token budgets (`budget:`); null means no limit."""

    daily_tokens_per_soul: int | None = Field(2_000_000, ge=0)
    """Tokens a soul may spend per UTC day on chat turns (every kind of token counts; admins'
    turns and background work have budgets of their own and do not count here); `null`: no
    limit."""
    daily_tokens_per_user: int | None = Field(200_000, ge=0)
    """Tokens one user (a DM's person, or a group chat) may cost per UTC day in chat turns;
    `null`: no limit."""
    daily_tokens_per_admin: int | None = Field(500_000, ge=0)
    """Tokens one admin may spend per UTC day in turns of their own DMs and the terminal chat,
    which no soul or user budget refuses (a group's turns are the group's, whoever speaks);
    `null`: no limit."""
    daily_tokens_background: int | None = Field(1_000_000, ge=0)
    """Tokens the background work of every soul together may spend per UTC day: the memory
    compile, the heartbeat and history compaction; it counts against no chat budget; `null`:
    no limit."""


class SoulsConfig(_Section):
    """The soul files (`souls:`)."""

    max_prompt_tokens: int = Field(MAX_PROMPT_TOKENS, ge=100)
    """The largest system prompt a soul may have, in tokens (estimated at 4 characters a token;
    the memory index aside): a soul whose SOUL.md and STYLE.md are over it is refused, with its
    size. No soul file over 16 bytes a token of it (320 KB by default) is read at all."""


class AdminsConfig(_Section):
    """Platform user ids allowed to run admin commands (`admins:`)."""

    discord: tuple[int, ...] = ()
    """Discord user ids allowed to run admin commands."""
    telegram: tuple[int, ...] = ()
    """Telegram user ids allowed to run admin commands."""


def _on_off_auto(value: Any) -> Any:
    if isinstance(value, bool) or value == "auto":
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise PydanticCustomError("on_off_auto", "expected true, false or auto")


def _on_off(value: Any) -> Any:
    """`on` / `off` as YAML 1.2 reads them (strings), beside booleans."""
    if isinstance(value, str) and value.lower() in ("on", "off"):
        return value.lower() == "on"
    return value


class ConsoleConfig(_Section):
    """The terminal chat (`adapters.console:`); `auto` is on when no platform has a token."""

    enabled: Annotated[bool | Literal["auto"], BeforeValidator(_on_off_auto)] = "auto"
    """The terminal chat: `auto` (on when no platform token is set), `true` or `false`."""


class DiscordConfig(_Section):
    """The Discord adapter (`adapters.discord:`); on when `token` is set."""

    token: Secret = SecretStr("")
    """The bot token (Developer Portal, Bot page); the adapter is on when it is set."""
    guilds: GroupRule = "mention"
    """In server channels: `mention` (answer when mentioned or replied to), `ambient` (that, and
    speak unprompted when the channel calls for it: `groups.ambient`) or `always`."""
    dm_policy: DmPolicy = "pairing"
    """Direct messages: `open`, `allowlist` or `pairing` (an admin approves a code)."""
    allowlist: tuple[int, ...] = ()
    """User ids that may always DM the bot (with `allowlist`: the only ones, besides admins)."""
    command_prefix: str = Field("!", min_length=1)
    """The text prefix of commands beside the slash commands (`!soul reload`)."""
    api_base_url: str | None = None
    """A REST proxy (`http://host/api/v10`); empty for Discord itself."""
    gateway_url: str | None = None
    """A gateway URL (`wss://...`); empty for Discord itself."""
    streaming: Annotated[bool, BeforeValidator(_on_off)] = True
    """`on`: a reply shows while the model writes it (one message sent early and edited, at most
    once a second); `off`: it comes whole."""
    shard_count: int | None = Field(None, ge=1)
    """How many shards the bot runs as, across all its processes (Discord requires one per 2,500
    servers); `null`: one connection, unsharded."""
    shard_ids: tuple[int, ...] | None = None
    """The shards this process holds (`[0, 1]` of `shard_count: 4`), each below `shard_count`;
    `null`: all of them. DMs come to the process holding shard 0."""

    _blank = field_validator("api_base_url", "gateway_url", mode="before")(_empty_is_none)

    @model_validator(mode="after")
    def _shards(self) -> DiscordConfig:
        if self.shard_ids is None:
            return self
        if self.shard_count is None:
            raise ValueError("shard_ids: set shard_count too (the shards of all processes)")
        if not self.shard_ids or len(set(self.shard_ids)) != len(self.shard_ids):
            raise ValueError("shard_ids: expected one or more different shard numbers")
        if not all(0 <= shard < self.shard_count for shard in self.shard_ids):
            raise ValueError(f"shard_ids: each must be from 0 to {self.shard_count - 1}")
        return self

    @field_validator("api_base_url", "gateway_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|wss?)://[^\s/]+", value):
            raise ValueError("expected an http(s):// or ws(s):// URL")
        return value


class WebhookConfig(_Section):
    """Telegram's webhook (`adapters.telegram.webhook:`); on when `url` is set."""

    url: str | None = None
    """The public HTTPS URL Telegram posts updates to (`https://bot.example.org/telegram`), which a
    proxy forwards to `listen` and `path`; `null`: the adapter polls."""
    listen: str = "127.0.0.1:8443"
    """Where this process takes the updates: `host:port`."""
    path: str = "/telegram"
    """The path updates are posted to, on `listen`."""
    secret_token: Secret = SecretStr("")
    """Sent by Telegram with every update and checked on every request (1-256 of `A-Z a-z 0-9 _
    -`); required with `url`."""

    _blank_url = field_validator("url", mode="before")(_empty_is_none)
    _listen = field_validator("listen")(_check_listen)

    @field_validator("url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https://[^\s/]+", value):
            raise ValueError("expected an https:// URL (Telegram posts to HTTPS only)")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or any(c.isspace() for c in value):
            raise ValueError("expected a path that starts with / (`/telegram`)")
        return value

    @model_validator(mode="after")
    def _secret(self) -> WebhookConfig:
        secret = self.secret_token.get_secret_value()
        if self.url is not None and not secret:
            raise ValueError("secret_token: required with url (Telegram sends it with each update)")
        if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            raise ValueError("secret_token: expected 1-256 of A-Z, a-z, 0-9, _ and -")
        return self


class TelegramConfig(_Section):
    """The Telegram adapter (`adapters.telegram:`); on when `token` is set."""

    token: Secret = SecretStr("")
    """The bot token from @BotFather; the adapter is on when it is set."""
    groups: GroupRule = "mention"
    """In groups: `mention` (an @mention, a reply to the bot, or `/command@bot`), `ambient` (that,
    and speak unprompted when the group calls for it: `groups.ambient`) or `always`."""
    dm_policy: DmPolicy = "pairing"
    """Direct messages: `open`, `allowlist` or `pairing` (an admin approves a code)."""
    allowlist: tuple[int, ...] = ()
    """User ids that may always DM the bot (with `allowlist`: the only ones, besides admins)."""
    base_url: str | None = None
    """A local Bot API server (`http://host:8081`, with or without `/bot`); empty for Telegram
    itself."""
    streaming: Annotated[bool, BeforeValidator(_on_off)] = True
    """`on`: a reply shows while the model writes it (a draft in private chats; in groups a message
    edited at most once a second); `off`: it comes whole."""

    webhook: WebhookConfig = WebhookConfig()
    """Updates pushed by Telegram to a URL of this process instead of polled (off unless `url`
    is set)."""

    _blank_url = field_validator("base_url", mode="before")(_empty_is_none)
    _url = field_validator("base_url")(_check_url)


class AdaptersConfig(_Section):
    """The platforms (`adapters:`)."""

    console: ConsoleConfig = ConsoleConfig()
    """The terminal chat."""
    discord: DiscordConfig = DiscordConfig()
    """The Discord bot."""
    telegram: TelegramConfig = TelegramConfig()
    """The Telegram bot."""


class Binding(_Section):
    """Which soul answers where (`bindings:` entries; the first match wins)."""

    platform: Literal["discord", "telegram", "console"]
    """`discord`, `telegram` or `console`."""
    soul: str = Field(min_length=1)
    """The id of the soul that answers where this binding matches."""
    guild: int | None = None
    """Match a Discord server id."""
    channel: int | None = None
    """Match a Discord channel id (a thread matches its parent channel)."""
    chat: int | None = None
    """Match a Telegram chat id."""
    memory: MemoryScope | None = None
    """The memory scope here (as `memory.scope`; `per-member` on a server or group binding:
    each member's own memory of that server)."""
    respond: GroupRule | None = None
    """`mention`, `ambient` or `always`: overrides `adapters.discord.guilds` /
    `adapters.telegram.groups` here."""
    respond_to_bots: bool | None = None
    """Whether other bots' messages may be answered here (overrides `groups.respond_to_bots`)."""
    voice_replies: VoiceReplies | None = None
    """`off`, `when-spoken-to` or `always`: whether answers here are also spoken (as
    `voice.speech.replies`, which applies where this is not set)."""
    check_ins: bool = False
    """Whether the persona may write first in a DM here to follow up on something the person
    said (an exam, a trip, a bad day): planned at the heartbeat, held to `check_ins:`
    (docs/reminders.md#check-ins). DMs only; a soul without a heartbeat plans none."""


class AmbientConfig(_Section):
    """Where a group's rule is `ambient`, when the persona speaks unprompted
    (`groups.ambient:`): a scorer without a model reads each message, and only above
    `threshold` one small forced-tool call asks `model` whether to speak (docs/groups.md)."""

    threshold: float = Field(0.5, ge=0, le=1)
    """The scorer's figure (0 to 1) from which the gate model is asked; below it, silence and no
    model call. Lower: more model calls, fewer missed moments."""
    model: str | None = None
    """The model that decides whether to speak (one forced `speak` tool call, ledgered as
    `ambient`); `null`: `model.fallback`, else `model.name`. A small, cheap model is enough."""
    replies_per_hour: int = Field(4, ge=0)
    """Unprompted replies one channel may get in an hour; past them, silence (no model call)."""
    cooldown_s: float = Field(120.0, ge=0)
    """Seconds of the channel's own time (its messages' timestamps) after an unprompted reply
    before another."""
    unanswered_after_s: float = Field(90.0, gt=0)
    """A question put to the room that nobody answered counts as unanswered once a message comes
    this many seconds after it."""

    _blank = field_validator("model", mode="before")(_empty_is_none)


class BotsConfig(_Section):
    """How far the persona talks with other bots where `respond_to_bots` is on (`groups.bots:`):
    its replies to bots in a row in a channel, with no person's message between, are made ever
    less likely and capped (docs/groups.md)."""

    decay: float = Field(0.5, ge=0, le=1)
    """The chance of the next reply to a bot is `decay` to the power of the replies to bots in a
    row so far: the first is certain, then 0.5, 0.25, ...; `0`: one reply to a bot, then none
    until a person speaks; `1`: only the cap stops them."""
    replies_per_minute: int = Field(3, ge=0)
    """Replies to bots one channel may get in a rolling minute (the messages' own timestamps);
    past them, silence (no model call). `0`: none."""


class GroupsConfig(_Section):
    """What the bot sees in group chats besides what is addressed to it (`groups:`)."""

    context_messages: int = Field(30, ge=0)
    """Messages not addressed to the bot kept per group chat, given to the next turn that is, as
    what was said since it last spoke; `0`: none (the bot sees only what is addressed to it)."""
    context_tokens: int = Field(1500, ge=0)
    """The most tokens of those messages a turn is given (the newest are kept)."""
    remember_unaddressed: bool = False
    """Also keep those messages as memory traces of the chat's scope (off: people who never
    spoke to the bot are not remembered by it)."""
    ambient: AmbientConfig = AmbientConfig()
    """When the persona speaks unprompted where the rule is `ambient`."""
    respond_to_bots: bool = False
    """Whether other bots' messages in groups may be answered (as a person's would be: a mention,
    a reply, `always`), within `groups.bots`; off: they are ignored, not even context. The
    persona's own messages are never answered. Telegram never delivers other bots' messages."""
    bots: BotsConfig = BotsConfig()
    """The chance and the cap of replies to bots where `respond_to_bots` is on."""


class MediaConfig(_Section):
    """Images people send (`media:`)."""

    max_images: int = Field(4, ge=0, le=20)
    """Images a message may carry to the model; the rest are refused with one line. `0`: none."""
    download_timeout_s: float = Field(20.0, gt=0)
    """Seconds an image's download may take before it is refused."""
    keep: bool = False
    """Keep each image under `data_dir/media/` after its turn (off: an image lives in memory for
    its turn only; the history and the traces keep a one-line placeholder)."""


class TranscriptionConfig(_Section):
    """Voice notes heard (`voice.transcription:`): an OpenAI-compatible `/v1/audio/transcriptions`
    endpoint (OpenAI, Groq, a local whisper server)."""

    base_url: str | None = None
    """Where the endpoint is served, up to `/v1` (`https://api.openai.com/v1`); empty: voice
    notes are not transcribed (the person is told in one line)."""
    model: str = Field("whisper-1", min_length=1)
    """The transcription model (`whisper-1`, `gpt-4o-mini-transcribe`, Groq's
    `whisper-large-v3-turbo`)."""
    api_key: Secret = SecretStr("")
    """The key, sent as `Authorization: Bearer` (`${OPENAI_API_KEY}`); empty for a local server
    that takes none."""
    max_seconds: int = Field(300, ge=1)
    """The longest voice note heard; a longer one is refused with one line, before it is
    downloaded."""
    max_bytes: int = Field(20_000_000, ge=1)
    """The largest voice note heard, in bytes; a larger one is refused with one line, and never
    downloaded past this size."""
    usd_per_minute: float = Field(0.006, ge=0)
    """US dollars a minute of audio costs, for the ledger (`soulbot usage`)."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds a voice note's download and its transcription may take, each."""
    in_groups: Literal["placeholder", "transcribe"] = "placeholder"
    """A group voice note not addressed to the bot: `placeholder` gives the next turn a line
    saying one came (nothing is downloaded); `transcribe` gives it the transcript (each such
    note is paid for)."""

    _blank = field_validator("base_url", mode="before")(_empty_is_none)
    _url = field_validator("base_url")(_check_url)


class OpenAISpeechConfig(_Section):
    """An OpenAI-compatible speech service, `POST <base_url>/audio/speech` (`voice.speech.openai`:
    OpenAI, or a local server that copies its API); for souls whose `voice` has `provider:
    openai`."""

    base_url: str = ""
    """Where it is served, with its `/v1` (`https://api.openai.com/v1`, `http://127.0.0.1:8880/v1`);
    empty: off."""
    model: str = Field("tts-1", min_length=1)
    """The speech model (`tts-1`, `tts-1-hd`, `gpt-4o-mini-tts`, a local server's own)."""
    api_key: Secret = SecretStr("")
    """Sent as `Authorization: Bearer ...`; may be empty for a local server."""
    usd_per_million_chars: float = Field(15.0, ge=0)
    """US dollars per million characters spoken, for the ledger."""

    _url = field_validator("base_url")(_check_url_or_empty)


class ElevenLabsConfig(_Section):
    """ElevenLabs (`voice.speech.elevenlabs`), for souls whose `voice` has `provider:
    elevenlabs`."""

    base_url: str = "https://api.elevenlabs.io"
    """Where its API is served."""
    model: str = Field("eleven_multilingual_v2", min_length=1)
    """The model (`model_id`): `eleven_multilingual_v2`, `eleven_flash_v2_5`, ..."""
    api_key: Secret = SecretStr("")
    """Sent as `xi-api-key`; empty: off."""
    usd_per_million_chars: float = Field(180.0, ge=0)
    """US dollars per million characters spoken, for the ledger (your plan's price)."""

    _url = field_validator("base_url")(_check_url)


class SpeechConfig(_Section):
    """Answers spoken as voice notes, in the voice of a soul's `voice:` block (`voice.speech`)."""

    replies: VoiceReplies = "when-spoken-to"
    """Where no binding sets `voice_replies`: `off`, `when-spoken-to` (an answer to a voice note
    is spoken too) or `always`. Nothing is spoken for a soul without a `voice:` provider, or whose
    provider is off here."""
    mode: Literal["beside", "only"] = "beside"
    """`beside`: the voice note comes after the text; `only`: the voice note alone (the text when
    speech fails)."""
    max_chars: int = Field(1200, ge=100, le=4000)
    """The most characters one speech request carries: a longer answer is spoken in parts, cut at
    sentence ends, joined into one voice note."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds one speech request may take."""
    openai: OpenAISpeechConfig = OpenAISpeechConfig()
    """An OpenAI-compatible speech service."""
    elevenlabs: ElevenLabsConfig = ElevenLabsConfig()
    """ElevenLabs."""


class VoiceConfig(_Section):
    """Voice notes (`voice:`)."""

    transcription: TranscriptionConfig = TranscriptionConfig()
    """Voice notes in: transcribed, and answered as the person's words."""
    speech: SpeechConfig = SpeechConfig()
    """Answers spoken."""


class RetentionConfig(_Section):
    """How long records no turn reads any more are kept (`retention:`); the nightly job
    deletes what is older, in small batches. `null` keeps them for ever. `/forget` erases a
    person's records whatever these say."""

    history_days: int | None = Field(30, ge=1)
    """Days a history row no turn loads any more (compacted into a summary, an older summary,
    or a conversation `/reset` or rebound) is kept; live rows stay."""
    usage_days: int | None = Field(90, ge=1)
    """UTC days of usage rows kept, today included: `soulbot usage --days` shows at most this
    many; budgets read today's only."""
    media_days: int | None = Field(30, ge=1)
    """Days an image `media.keep` saved under `data_dir/media/` is kept."""
    reply_address_days: int | None = Field(30, ge=1)
    """Days a session's reply address (kept so a restart can answer a message a crash left
    unanswered) outlives the session's newest history row."""


class RemindersConfig(_Section):
    """Reminders the persona sets when asked (`reminders:`; docs/reminders.md)."""

    max_pending: int = Field(20, ge=1)
    """Reminders one person may have waiting at once; the persona is told when one more would
    pass it, and says so."""
    max_days_ahead: int = Field(366, ge=1)
    """How far ahead a reminder may be set, in days."""
    grace_s: float = Field(21600.0, ge=0)
    """A reminder that came due while no process could deliver it (the daemon was down) is
    delivered late, saying how late, up to this many seconds past its time; later than that it
    is dropped and logged (`reminders.dropped`). Late is more than 3 minutes past its minute
    (one within them, as a poll delivers it, is on time however small this is): `0`, a late one
    is always dropped."""
    poll_s: float = Field(30.0, gt=0, le=60)
    """How often, in seconds, the store is read for reminders that came due: a reminder is
    delivered within this of its minute."""


class CheckInsConfig(_Section):
    """Check-ins, where a binding turns them on (`check_ins:`; docs/reminders.md#check-ins)."""

    quiet_start: int = Field(22, ge=0, le=23)
    """The hour, in the person's time zone, from which no check-in is sent."""
    quiet_end: int = Field(9, ge=0, le=23)
    """The hour, in the person's time zone, until which no check-in is sent; a check-in planned
    inside the quiet hours moves to this hour."""
    per_week: int = Field(2, ge=1)
    """Check-ins one person may get in seven days."""


class SessionsConfig(_Section):
    """Conversations across restarts (`sessions:`)."""

    recover_window_s: float = Field(600.0, ge=0)
    """At start, a conversation whose newest message came this many seconds or less before and
    has no reply (the process died mid-turn) is answered once; older ones are context for the
    next turn. `0`: none is."""

    lease_s: float = Field(300.0, gt=0)
    """How long a process's claim on a conversation lasts, renewed at each round of its turn:
    while it holds it, no other process sharing the store answers the conversation, nor recovers
    it at start. Longer than a turn may take; a crashed process's conversations wait this long
    for another process (its own restart takes them at once). PostgreSQL only: on SQLite one
    daemon answers every conversation and takes no lease."""


class LimitsConfig(_Section):
    """Limits on how fast people may write (`limits:`)."""

    messages_per_minute: int | None = Field(20, ge=1)
    """Messages one person may send a minute before theirs wait for the next turn of their chat
    (they are told once); `null`: no limit. The terminal is never limited."""


class ShutdownConfig(_Section):
    """The graceful stop (`shutdown:`)."""

    deadline_s: float = Field(150.0, gt=0)
    """Seconds the whole graceful stop may take (turns, memory writes, reflections, the compile);
    what is cut short is logged (`shutdown.cut_short`). Keep it under the supervisor's stop timeout
    (180 s in deploy/soulbot.service and deploy/compose.yaml)."""


class MetricsConfig(_Section):
    """Prometheus metrics (`metrics:`); off unless `listen` is set."""

    listen: str | None = None
    """Where `soulbot run` serves Prometheus metrics at `/metrics`: `host:port`
    (`127.0.0.1:9464`; `0.0.0.0:9464` for every interface: the metrics carry soul
    names and token counts, no message text); `null`: no metrics, nothing listens."""

    _blank = field_validator("listen", mode="before")(_empty_is_none)
    _listen = field_validator("listen")(_check_listen)


class WebConfig(_Section):
    """The web console (`web:`, docs/web.md): souls, memory, usage, people and health pages
    for admins, served by `soulbot run`; off unless `enabled`."""

    enabled: bool = False
    """Serve the console; `soulbot web-login` and `/soul web` give an admin a sign-in link."""
    listen: str = "127.0.0.1:8080"
    """Where it listens: `host:port`. Off loopback, put HTTPS in front (a reverse proxy) and set
    `public_url` to its `https://` address: `soulbot check` warns otherwise."""
    public_url: str | None = None
    """The address people open (`https://bot.example.org`), used in sign-in links; an `https://`
    one makes the session cookie `Secure`. `null`: `http://` and `listen`."""
    session_hours: float = Field(12.0, gt=0)
    """How long a sign-in lasts (hours)."""
    link_minutes: float = Field(10.0, gt=0)
    """How long a sign-in link may wait before it is used (minutes); it works once."""

    _listen = field_validator("listen")(_check_listen)
    _blank_url = field_validator("public_url", mode="before")(_empty_is_none)

    @field_validator("public_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// address")
        return value.rstrip("/") if value is not None else None

    def base_url(self) -> str:
        """Where the console is reached: `public_url`, else `listen` over http."""
        if self.public_url:
            return self.public_url
        host, port = split_listen(self.listen)
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    def secure(self) -> bool:
        """True when people reach it over HTTPS (the cookie is then `Secure`)."""
        return self.base_url().startswith("https://")


class HealthConfig(_Section):
    """What `soulbot health` counts as healthy (`health:`)."""

    deaf_after_s: float | None = Field(900.0, gt=0)
    """`soulbot health` fails ("deaf") when an adapter that says it is connected has heard
    nothing from its platform for this many seconds: no Telegram poll answered, no Discord
    gateway message or heartbeat answer; `null`: never."""
    store_stalled_after_s: float | None = Field(60.0, gt=0)
    """`soulbot health` fails ("store stalled") when the oldest call to the store queued or
    running has waited this many seconds (`store_wait_s` of the health file: every chat waits
    behind it); `null`: never."""


class StoreConfig(_Section):
    """Where soulbot keeps its records (`store:`): history, traces, usage, pairing."""

    url: str | None = None
    """`null`: SQLite, the file `soulbot.db` in `data_dir` (nothing to run);
    `sqlite:///path/to/file.db`: a SQLite file elsewhere; `postgresql://user@host:5432/db`: a
    PostgreSQL 13+ database, which several soulbot processes can share (a password may come from
    `PGPASSWORD`)."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """PostgreSQL: seconds a connection to the server may take (whole seconds, at least 2)."""
    statement_timeout_s: float | None = Field(30.0, gt=0)
    """PostgreSQL: seconds one statement may run before the server cancels it (the turn that
    made it fails, its message kept for the next turn); `null`: no limit. Schema upgrades at
    start have none."""
    lock_timeout_s: float | None = Field(10.0, gt=0)
    """PostgreSQL: seconds a statement may wait for a lock another session holds (a long
    transaction, an operator's `LOCK TABLE`) before it fails; `null`: no limit. Every store call
    of the process waits behind it, so keep it short. SQLite waits 5 s for its file's lock."""
    keepalive_s: float = Field(30.0, gt=0)
    """PostgreSQL: seconds a connection may be idle before TCP keepalive probes ask whether the
    server is there; three unanswered probes, a third of this apart, drop the connection (the
    next call connects again)."""

    _blank = field_validator("url", mode="before")(_empty_is_none)

    @field_validator("url")
    @classmethod
    def _engine(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(sqlite:///.+|postgres(ql)?://\S*)$", value):
            raise ValueError("expected sqlite:///path/to/file.db or postgresql://user@host/db")
        return value

    def timeouts(self) -> Timeouts:
        """The PostgreSQL limits these keys set."""
        return Timeouts(self.connect_timeout_s, self.statement_timeout_s, self.lock_timeout_s,
                        self.keepalive_s)  # fmt: skip


class Config(_Section):
    """The whole of soulbot.yaml."""

    workspaces: Path = Path("workspaces")
    """The folder with one sub-folder per soul."""
    data_dir: Path = Path("data")
    """The SQLite store, the private memory wikis, the health file."""
    store: StoreConfig = StoreConfig()
    """The database: SQLite in `data_dir`, or PostgreSQL."""
    instance: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")
    """The name of this process among several that share `data_dir` (a folder all of them reach)
    and a PostgreSQL `store.url` (`shards-0-1`); its lock, pid and health files are
    `soulbot-<instance>.lock`, `soulbot-<instance>.pid` and `health-<instance>.json`. `null`: one
    process per `data_dir`."""
    default_soul: str | None = None
    """The soul that answers where no binding matches (may be left out when only one soul is
    loaded)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """`debug`, `info`, `warning` or `error`."""
    model: ModelConfig = ModelConfig()
    """The model client."""
    memory: MemoryConfig = MemoryConfig()
    """Long-term memory."""
    budget: BudgetConfig = BudgetConfig()
    """Daily token budgets; a call that would pass one is not made."""
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    """The heartbeat of souls whose SOUL.md has regions."""
    souls: SoulsConfig = SoulsConfig()
    """The soul files: how large a soul's prompt may be."""
    admins: AdminsConfig = AdminsConfig()
    """Platform user ids allowed to run admin commands."""
    adapters: AdaptersConfig = AdaptersConfig()
    """The platforms."""
    groups: GroupsConfig = GroupsConfig()
    """Group chats: the context the bot is given."""
    media: MediaConfig = MediaConfig()
    """Images."""
    voice: VoiceConfig = VoiceConfig()
    """Voice notes."""
    retention: RetentionConfig = RetentionConfig()
    """How long records no turn reads any more are kept."""
    sessions: SessionsConfig = SessionsConfig()
    """Conversations across restarts."""
    reminders: RemindersConfig = RemindersConfig()
    """Reminders the persona sets."""
    check_ins: CheckInsConfig = CheckInsConfig()
    """Follow-ups the persona plans, where a binding turns them on."""
    limits: LimitsConfig = LimitsConfig()
    """How fast people may write."""
    shutdown: ShutdownConfig = ShutdownConfig()
    """The graceful stop."""
    metrics: MetricsConfig = MetricsConfig()
    """Prometheus metrics."""
    health: HealthConfig = HealthConfig()
    """What `soulbot health` checks."""
    web: WebConfig = WebConfig()
    """The web console for admins."""
    bindings: tuple[Binding, ...] = ()
    """Which soul answers where, and with which memory scope; the first match wins, `default_soul`
    otherwise."""

    _blank_soul = field_validator("default_soul", mode="before")(_empty_is_none)
    _blank_instance = field_validator("instance", mode="before")(_empty_is_none)

    @model_validator(mode="after")
    def _shared_store(self) -> Config:
        if self.instance is not None and not is_postgres(self.store.url or ""):
            raise ValueError(
                "instance: needs a PostgreSQL store.url (processes cannot share a SQLite file)"
            )
        return self

    def secrets(self) -> list[str]:
        """The secret values that are set, for the log redactor."""
        values = (
            self.model.api_key,
            self.adapters.discord.token,
            self.adapters.telegram.token,
            self.adapters.telegram.webhook.secret_token,
            self.voice.transcription.api_key,
            self.voice.speech.openai.api_key,
            self.voice.speech.elevenlabs.api_key,
        )
        return [v.get_secret_value() for v in values if v.get_secret_value()]
