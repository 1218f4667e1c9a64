"""The usage ledger and the daily token budgets (docs/conversations.md).

Every model call is one row in the `usage` table (`bot.storage.db`) and one `llm.usage`
log line. `Ledger.check` refuses a call, before it is made, when it would take
its budget past today's limit. Days are UTC days. A call counts against one
family of budgets, by who it is for and its source:

- background work (`compile`, `heartbeat`, `compact`): the background budget,
  every soul's together;
- a turn of an admin (a DM's `user` in `admins.<platform>`, or the terminal
  chat): that admin's own budget;
- any other turn: its soul's budget and its user's (in a group, the group's);
  so do ambient mode's calls (bot/chat/ambient.py) in a group: its gate
  (`ambient`) and the replies it lets through (`ambient_reply`), each a source
  of its own in the report.

Budgets count tokens, not dollars: every token the model processed (input,
output, cache writes and cache reads) counts once. A cache figure the model
server did not report (another server of the Messages API:
docs/model-servers.md) is unknown: NULL in the table, `unknown` in the
report, and no token for the budgets and the cost. The cost in US dollars comes
from `DEFAULT_PRICES` or the config's `model.prices`, and is for the report.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import astuple, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import structlog

from bot import prompts
from bot.config.schema import AdminsConfig, BudgetConfig, Price
from bot.errors import BudgetExceeded
from bot.storage.db import Database
from bot.storage.sql import Conn

log = structlog.get_logger(__name__)

Source = Literal["turn", "ambient", "ambient_reply", "compile", "heartbeat", "compact"]
Family = Literal["chat", "background"]
VoiceKind = Literal["heard", "spoken"]
BudgetKind = Literal["soul", "user", "admin", "background"]

BACKGROUND: tuple[Source, ...] = ("compile", "heartbeat", "compact")
"""The sources of background work: a budget of their own, a line apart in the report."""
AMBIENT: tuple[Source, ...] = ("ambient", "ambient_reply")
"""Ambient mode's sources (its gate, its unprompted replies): chat work, a line of their
own under the report's `chat` line."""
EVERY_SOUL = "every soul"
"""Who the background budget is for (in `budget.refused` and BudgetExceeded)."""
# The terminal chat is the operator's own, an admin's as for the commands (bot/chat/access.py).
_CONSOLE = "console:"


def family(source: str) -> Family:
    """`background` for the sources of background work, else `chat`."""
    return "background" if source in BACKGROUND else "chat"


def _price(input_usd: float, output_usd: float) -> Price:
    """A price with the 5-minute cache write (1.25 x input) and cache read (0.1 x input)."""
    return Price(
        input=input_usd,
        output=output_usd,
        cache_write=round(input_usd * 1.25, 6),
        cache_read=round(input_usd * 0.1, 6),
    )


# USD per million tokens, keyed by model-family prefix (see `price_for`). Opus 4.5
# and later are a third of the earlier Opus price, so each needs its own key.
DEFAULT_PRICES: dict[str, Price] = {
    "claude-opus-4-8": _price(5, 25),
    "claude-opus-4-7": _price(5, 25),
    "claude-opus-4-6": _price(5, 25),
    "claude-opus-4-5": _price(5, 25),
    "claude-opus-4-1": _price(15, 75),
    "claude-opus-4": _price(15, 75),
    "claude-sonnet-4": _price(3, 15),
    "claude-haiku-4-5": _price(1, 5),
    "claude-3-5-haiku": _price(0.80, 4),
    # The no-key trial's demo model (`make fake`, tests/fakes/demo.py) reports the
    # model "demo"; it is free, and so by the prefix rule is any name starting "demo".
    "demo": _price(0, 0),
}


def price_for(model: str, overrides: Mapping[str, Price] = {}) -> Price | None:
    """The price of `model`: the configured `overrides` first, then `DEFAULT_PRICES`.

    In each table an exact key wins, then the longest key the model name starts
    with (so `claude-sonnet-4-5-20250929` takes `claude-sonnet-4`). None when no
    key fits.
    """
    for table in (overrides, DEFAULT_PRICES):
        if model in table:
            return table[model]
        prefixes = [key for key in table if model.startswith(key)]
        if prefixes:
            return table[max(prefixes, key=len)]
    return None


def unpriced_model(
    key: str, model: str, known: Collection[str], overrides: Mapping[str, Price]
) -> str | None:
    """A warning when the model name `model` (of config key `key`) has no price
    (`price_for`): likely a misspelt name, which the API refuses at every turn,
    with the closest of `known` names and the price table's keys; None when it
    has one."""
    if price_for(model, overrides) is not None:
        return None
    names = [*known, *overrides, *DEFAULT_PRICES]
    close = difflib.get_close_matches(model, list(dict.fromkeys(names)), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (
        f"{key}: '{model}' is no model of the price table{hint}: a misspelt name is refused "
        "by the API at every turn; a model served elsewhere is not priced in `soulbot usage` "
        "(add it to model.prices)"
    )


def utc_day(ts: float) -> str:
    """The UTC day of `ts` (`2026-12-04`): the ledger's `day`, what budgets count by."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _plus(a: int | None, b: int | None) -> int | None:
    """Two cache figures added: unknown (None) only when both are."""
    return None if a is None and b is None else (a or 0) + (b or 0)


@dataclass(frozen=True)
class Usage:
    """The token counts of one model call, as the Messages API reports them.

    A cache figure is None when the server reported none: another server of the
    Messages API (Ollama, vLLM, LiteLLM's proxy: docs/model-servers.md) may leave
    the fields out. Unknown is not zero: it is stored as NULL and shown as unknown;
    the budgets and the cost count it as no token."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = 0
    cache_read_input_tokens: int | None = 0

    def __post_init__(self) -> None:
        """Raises ValueError on a negative count."""
        counts = (
            self.input_tokens,
            self.output_tokens,
            self.cache_creation_input_tokens or 0,
            self.cache_read_input_tokens or 0,
        )
        if any(n < 0 for n in counts):
            raise ValueError(f"token counts cannot be negative: {self}")

    def __add__(self, other: Usage) -> Usage:
        """The counts of two calls together; a cache figure is unknown only when
        both calls' are."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=_plus(
                self.cache_creation_input_tokens, other.cache_creation_input_tokens
            ),
            cache_read_input_tokens=_plus(
                self.cache_read_input_tokens, other.cache_read_input_tokens
            ),
        )

    @property
    def total(self) -> int:
        """Every token the model processed: input, output, cache writes and cache
        reads (an unknown figure counts none). This is what the daily budgets
        count; a cache read counts as a whole token although it costs a tenth of one."""
        return (
            self.input_tokens
            + self.output_tokens
            + (self.cache_creation_input_tokens or 0)
            + (self.cache_read_input_tokens or 0)
        )

    def cost(self, price: Price) -> float:
        """US dollars for these tokens at `price` (dollars per million tokens)."""
        return (
            self.input_tokens * price.input
            + self.output_tokens * price.output
            + (self.cache_creation_input_tokens or 0) * price.cache_write
            + (self.cache_read_input_tokens or 0) * price.cache_read
        ) / 1_000_000


@dataclass(frozen=True)
class CallContext:
    """Who a model call is made for. `user` is "" for a call made for no user
    (a compile, say). Whether the call is an admin's the Ledger decides from
    `user` and the config's admins; `source` says whether it is background work."""

    soul: str
    scope: str  # "shared", "user:telegram:42", ...
    session: str  # a session key, "telegram:42"
    user: str  # "telegram:42", or ""
    source: Source


@dataclass(frozen=True)
class _Today:
    """Today's token totals per budget, `(kind, who)`. Only the database thread
    writes to them, so a read and a write never race."""

    day: str
    totals: dict[tuple[BudgetKind, str], int]


_INSERT = """
INSERT INTO usage (ts, day, soul, scope, session, "user", source, model, input_tokens,
    output_tokens, cache_creation_input_tokens, cache_read_input_tokens, cost_usd)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


_INSERT_VOICE = """
INSERT INTO voice_usage (ts, day, soul, scope, session, "user", source, kind, model, amount,
    cost_usd)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


def _add_totals(budgets: int) -> str:
    """A usage row and what it adds to this process's rows of the day's totals of
    `budgets` budgets (`budget_totals`, a shared store's: bot/storage/postgres.py)
    as one PostgreSQL statement: atomic, one round trip where a transaction takes four."""
    values = ", ".join(["(?, ?, ?, ?, ?)"] * budgets)
    return (
        f"WITH written AS ({_INSERT}) "
        f"INSERT INTO budget_totals (day, kind, who, instance, tokens) "
        f"VALUES {values} ON CONFLICT (day, kind, who, instance) "
        "DO UPDATE SET tokens = budget_totals.tokens + excluded.tokens"
    )


# A cache figure a server did not report is NULL: it adds no token.
_TOKENS = (
    "input_tokens + output_tokens + COALESCE(cache_creation_input_tokens, 0)"
    " + COALESCE(cache_read_input_tokens, 0)"
)


def admin_users(config: AdminsConfig) -> frozenset[str]:
    """The `user` of each admin's DM turns, `platform:id`."""
    return frozenset(
        f"{platform}:{user_id}" for platform, ids in config.model_dump().items() for user_id in ids
    )


class Ledger:
    """Records model calls and enforces the daily token budgets.

    On SQLite (one process), `check` reads today's totals from memory: they are
    loaded from the table on the first check of a UTC day (so they survive a
    restart), then kept up to date by `record`. On a store processes share
    (PostgreSQL), `record` adds each call to its budgets' rows of
    `budget_totals` in the transaction that records it, rows of this process's
    own (`instance`, the config's), and `check` sums every process's rows:
    every process counts against one total. `admins` (the config's `admins:`)
    say whose DM turns count against an admin's budget.
    """

    def __init__(
        self,
        db: Database,
        *,
        prices: Mapping[str, Price] = {},
        budget: BudgetConfig,
        admins: AdminsConfig | None = None,
        instance: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._instance = instance
        self._prices = dict(prices)
        self._admins = admin_users(admins) if admins is not None else frozenset()
        self._limits: dict[BudgetKind, int | None] = {
            "soul": budget.daily_tokens_per_soul,
            "user": budget.daily_tokens_per_user,
            "admin": budget.daily_tokens_per_admin,
            "background": budget.daily_tokens_background,
        }
        self._clock = clock
        self._today: _Today | None = None
        self._unpriced: set[str] = set()

    async def record(self, ctx: CallContext, model: str, usage: Usage) -> float:
        """Write one `usage` row and log `llm.usage`; return the cost in US dollars.

        A model with no known price costs 0.0 and is logged once as
        `llm.price_unknown`. Raises RuntimeError when the database is closed and
        sqlite3.Error when the write fails.
        """
        price = price_for(model, self._prices)
        if price is None:
            cost = 0.0
            if model not in self._unpriced:
                self._unpriced.add(model)
                log.warning("llm.price_unknown", model=model)
        else:
            cost = usage.cost(price)
        ts = self._clock()
        day = utc_day(ts)
        fields = {
            "soul": ctx.soul,
            "scope": ctx.scope,
            "session": ctx.session,
            "user": ctx.user,
            "source": ctx.source,
            "model": model,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cost_usd": cost,
        }

        keys = charged(ctx.soul, ctx.user, ctx.source, self._admins)

        def write(conn: Conn) -> None:
            if self._db.shared:
                added = [
                    value
                    for kind, who in keys
                    for value in (day, kind, who, self._instance, usage.total)
                ]
                conn.execute(_add_totals(len(keys)), (ts, day, *fields.values(), *added))
                return
            conn.execute(_INSERT, (ts, day, *fields.values()))
            today = self._today
            # Totals of another day are left alone: a later load reads the row.
            if today is not None and today.day == day:
                for key in keys:
                    today.totals[key] = today.totals.get(key, 0) + usage.total

        await self._db.run(write)
        log.info("llm.usage", **fields)
        return cost

    async def record_voice(
        self, ctx: CallContext, kind: VoiceKind, model: str, amount: float, cost_usd: float
    ) -> None:
        """Write one `voice_usage` row and log `voice.usage`: `amount` is seconds
        of audio transcribed (`heard`) or characters synthesised (`spoken`),
        `cost_usd` its price (the caller's, from the config). Raises
        RuntimeError when the database is closed and the store's error when
        the write fails."""
        ts = self._clock()
        fields = {
            "soul": ctx.soul,
            "scope": ctx.scope,
            "session": ctx.session,
            "user": ctx.user,
            "source": ctx.source,
            "kind": kind,
            "model": model,
            "amount": amount,
            "cost_usd": cost_usd,
        }
        await self._db.run(
            lambda conn: conn.execute(_INSERT_VOICE, (ts, utc_day(ts), *fields.values()))
        )
        log.info("voice.usage", **fields)

    @property
    def enforces_limits(self) -> bool:
        """Whether any daily budget is set (else `check` never refuses)."""
        return any(limit is not None for limit in self._limits.values())

    async def check(self, ctx: CallContext, estimated_tokens: int) -> None:
        """Refuse a model call that would cross today's budget; call it before the call.

        Background work is checked against the background budget only; an
        admin's turn against that admin's budget only; any other turn against
        its soul's, then its user's (skipped when `ctx.user` is ""). Raises
        BudgetExceeded (kind "background", "admin", "soul" or "user") when
        today's total plus `estimated_tokens` is over the limit, after logging
        `budget.refused`. A limit of None is never checked. Raises RuntimeError
        when the database is closed.
        """
        limited = [
            (kind, who, limit)
            for kind, who in charged(ctx.soul, ctx.user, ctx.source, self._admins)
            if (limit := self._limits[kind]) is not None
        ]
        if not limited:
            return
        if self._db.shared:
            totals = await self._shared_totals([(kind, who) for kind, who, _ in limited])
        else:
            totals = (await self._totals()).totals
        for kind, who, limit in limited:
            used = totals.get((kind, who), 0)
            if used + estimated_tokens > limit:
                log.warning(
                    "budget.refused",
                    kind=kind,
                    who=who,
                    limit=limit,
                    used=used,
                    estimated=estimated_tokens,
                    soul=ctx.soul,
                    session=ctx.session,
                )
                raise BudgetExceeded(kind, who, limit, used)

    async def _shared_totals(
        self, keys: list[tuple[BudgetKind, str]]
    ) -> dict[tuple[BudgetKind, str], int]:
        """Today's totals of `keys` as the database counts them, for every
        process that shares it (`budget_totals`, added to by each `record`)."""
        day = utc_day(self._clock())

        def query(conn: Conn) -> dict[tuple[BudgetKind, str], int]:
            rows = conn.execute(
                "SELECT kind, who, SUM(tokens) FROM budget_totals WHERE day = ? AND ("
                + " OR ".join(["(kind = ? AND who = ?)"] * len(keys))
                + ") GROUP BY kind, who",
                (day, *(value for key in keys for value in key)),
            )
            found = {(kind, who): int(tokens) for kind, who, tokens in rows}
            return {key: found.get(key, 0) for key in keys}

        return await self._db.run(query)

    async def _totals(self) -> _Today:
        """Today's totals, loaded from the table when the UTC day has changed."""
        day = utc_day(self._clock())
        today = self._today
        if today is not None and today.day == day:
            return today
        return await self._db.run(lambda conn: self._load(conn, day))

    def _load(self, conn: Conn, day: str) -> _Today:
        """On the database thread: the totals of `day`, from the table unless
        a concurrent check has just loaded them. The rows are charged as
        `record` charges them, with today's admins."""
        today = self._today
        if today is None or today.day != day:
            today = _Today(day, day_charges(conn, day, self._admins))
            self._today = today
        return today


def charged(
    soul: str, user: str, source: str, admins: frozenset[str]
) -> list[tuple[BudgetKind, str]]:
    """The budgets a call counts against, in the order they are checked;
    `admins` is whose DM turns are an admin's (`platform:id`)."""
    if family(source) == "background":
        return [("background", EVERY_SOUL)]
    if user in admins or user.startswith(_CONSOLE):
        return [("admin", user)]
    return [("soul", soul), ("user", user)] if user else [("soul", soul)]


def day_charges(conn: Conn, day: str, admins: frozenset[str]) -> dict[tuple[BudgetKind, str], int]:
    """The tokens each budget has used on UTC `day`, from the usage rows."""
    rows = conn.execute(
        f'SELECT soul, "user", source, SUM({_TOKENS}) FROM usage WHERE day = ?'
        ' GROUP BY soul, "user", source',
        (day,),
    )
    totals: dict[tuple[BudgetKind, str], int] = {}
    for soul, user, source, tokens in rows:
        for key in charged(soul, user, source, admins):
            totals[key] = totals.get(key, 0) + int(tokens)
    return totals


def day_totals(conn: Conn, now: float) -> tuple[int, float]:
    """All tokens (input of every kind and output) and the cost in US dollars
    of the UTC day of `now`."""
    tokens, cost = conn.execute(
        f"SELECT SUM({_TOKENS}), SUM(cost_usd) FROM usage WHERE day = ?", (utc_day(now),)
    ).fetchone()
    return int(tokens or 0), float(cost or 0.0)


_GROUPS = ("soul", "source", "day", "model")
_FAMILY = (
    f"CASE WHEN source IN ({', '.join(repr(s) for s in BACKGROUND)})"
    " THEN 'background' ELSE 'chat' END"
)
_FAMILIES: tuple[Family, ...] = ("chat", "background")
SUMS = (
    "COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_input_tokens),"
    " SUM(cache_read_input_tokens), SUM(cost_usd), COUNT(cache_read_input_tokens),"
    " SUM(CASE WHEN cache_read_input_tokens IS NULL THEN 0 ELSE input_tokens END)"
)
_HEADER = ("calls", "input", "output", "cache write", "cache read", "cache hit", "cost USD")
UNKNOWN = "unknown"
"""A cache cell of calls whose server reported no cache figures."""
PARTIAL = "*"
"""The mark of a cache figure of some calls only (the others' server reported none)."""


@dataclass(frozen=True)
class Sums:
    """One report row's sums (`SUMS`); `known`: the calls with cache figures,
    `known_input`: their input tokens."""

    calls: int = 0
    inp: int = 0
    out: int = 0
    write: int = 0
    read: int = 0
    cost: float = 0.0
    known: int = 0
    known_input: int = 0

    @classmethod
    def of(cls, row: Sequence[Any]) -> Sums:
        """From the values of `SUMS` (a SUM of no row, or of NULLs only, is NULL)."""
        calls, inp, out, write, read, cost, known, known_input = row
        return cls(int(calls), int(inp or 0), int(out or 0), int(write or 0), int(read or 0),
                   float(cost or 0.0), int(known), int(known_input or 0))  # fmt: skip

    @property
    def tokens(self) -> int:
        """Every token the calls processed: input, output, cache writes and reads."""
        return self.inp + self.out + self.write + self.read

    def hit_share(self) -> float | None:
        """Cache reads over all input tokens of the calls with cache figures
        (`known`); None when they have none."""
        prompt = self.known_input + self.write + self.read
        return self.read / prompt if prompt else None

    def __add__(self, other: Sums) -> Sums:
        return Sums(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def cells(self, key: str) -> list[str]:
        """The row: cache figures `UNKNOWN` when no call has them, marked
        `PARTIAL` when some have not (the hit share is then theirs only)."""
        head = [key, *(f"{n:,}" for n in (self.calls, self.inp, self.out))]
        if self.calls and not self.known:
            return [*head, UNKNOWN, UNKNOWN, UNKNOWN, f"{self.cost:,.4f}"]
        mark = PARTIAL if self.known < self.calls else ""
        share = self.hit_share()
        hit = f"{100 * share:.1f}%{mark}" if share is not None else "-"
        cache = [f"{self.write:,}{mark}", f"{self.read:,}{mark}", hit]
        return [*head, *cache, f"{self.cost:,.4f}"]


def report_days(days: int, now: float) -> tuple[str, str]:
    """The first and last UTC day (`2026-12-04`) of the last `days` days of
    `now`, today included. Raises ValueError for a `days` below 1."""
    if days < 1:
        raise ValueError(f"days must be 1 or more, not {days}")
    today = datetime.fromtimestamp(now, UTC).date()
    return (today - timedelta(days=days - 1)).isoformat(), today.isoformat()


def span_text(first: str, last: str) -> str:
    """`2026-12-01 to 2026-12-07 UTC`, or `2026-12-07 UTC` for one day."""
    return f"{first} to {last} UTC" if first != last else f"{last} UTC"


def usage_table(conn: Conn, *, days: int, by: str, now: float) -> str:
    """The `soulbot usage` and `/soul usage` report: calls, tokens, cache hit
    share and cost per soul, source, day or model over the last `days` UTC days
    (today included), with a TOTAL row and, under it, the TOTAL's `chat` and
    `background` rows (`BACKGROUND` sources; each family has budgets of its
    own), and under `chat` an `ambient` row when ambient mode made calls (its
    gate and its unprompted replies: `AMBIENT`). The cache hit share is cache
    reads over all input tokens. Calls whose server reported no cache figures
    (NULL) make those cells `UNKNOWN`, or marked as partial, with a line under
    the table saying so. Under it, when the days hold any, the voice table
    (`_voice_lines`).

    Raises ValueError for an unknown `by` or a `days` below 1.
    """
    first, last = report_days(days, now)
    span = span_text(first, last)
    tokens = _token_lines(conn, by, first, last)
    voice = _voice_lines(conn, by, first, last)
    if not tokens and not voice:
        return prompts.USAGE_NONE.format(days=days, span=span)
    lines = tokens or ["No model calls."]
    if voice:
        lines += ["", *voice]
    return f"Usage by {by}, {span}\n" + "\n".join(lines)


def grouped(
    conn: Conn, by: str | Sequence[str], sums: str, table: str, first: str, last: str
) -> list[Any]:
    """`sums` of `table`'s rows from day `first` to `last`, per `by` (a column of
    `_GROUPS`, or several: a row per combination, their values first): by day in
    order when `by` starts with `day`, else the costliest first."""
    columns = [by] if isinstance(by, str) else list(by)
    if not columns or any(column not in _GROUPS for column in columns):
        raise ValueError(f"cannot group usage by {by!r}: expected one of {', '.join(_GROUPS)}")
    keys = ", ".join(columns)
    order = keys if columns[0] == "day" else f"SUM(cost_usd) DESC, {keys}"
    return conn.execute(
        f"SELECT {keys}, {sums} FROM {table} WHERE day BETWEEN ? AND ?"
        f" GROUP BY {keys} ORDER BY {order}",
        (first, last),
    ).fetchall()


def _token_lines(conn: Conn, by: str, first: str, last: str) -> list[str]:
    """The model calls' table of `usage_table`; empty when the days hold none."""
    rows = grouped(conn, by, SUMS, "usage", first, last)
    if not rows:
        return []
    sums = [(str(key), Sums.of(ns)) for key, *ns in rows]
    body = [row.cells(key) for key, row in sums]
    whole = sum((row for _, row in sums), Sums())
    total = whole.cells("TOTAL")
    families = {
        fam: Sums.of(ns)
        for fam, *ns in conn.execute(
            f"SELECT {_FAMILY} AS fam, {SUMS} FROM usage WHERE day BETWEEN ? AND ? GROUP BY fam",
            (first, last),
        )
    }
    split = [families.get(fam, Sums()).cells(f"  {fam}") for fam in _FAMILIES]
    ambient = Sums.of(conn.execute(
        f"SELECT {SUMS} FROM usage WHERE day BETWEEN ? AND ? AND source IN"
        f" ({', '.join(repr(s) for s in AMBIENT)})",
        (first, last),
    ).fetchone())  # fmt: skip
    if ambient.calls:
        split.insert(1, ambient.cells("    ambient"))
    lines = _render([by, *_HEADER], body, [total, *split])
    if whole.known < whole.calls:
        lines.append(_unknown_note(whole))
    return lines


_VOICE_HEADER = ("seconds heard", "heard USD", "characters spoken", "spoken USD")
VOICE_SUMS = (
    "SUM(CASE WHEN kind = 'heard' THEN amount ELSE 0 END),"
    " SUM(CASE WHEN kind = 'heard' THEN cost_usd ELSE 0 END),"
    " SUM(CASE WHEN kind = 'spoken' THEN amount ELSE 0 END),"
    " SUM(CASE WHEN kind = 'spoken' THEN cost_usd ELSE 0 END)"
)


def _voice_lines(conn: Conn, by: str, first: str, last: str) -> list[str]:
    """The voice table of `usage_table`: seconds of voice notes heard and
    characters spoken, each with its cost, per `by` and in TOTAL; empty when
    the days hold no voice row."""
    rows = grouped(conn, by, VOICE_SUMS, "voice_usage", first, last)
    if not rows:
        return []
    sums = [(str(key), tuple(float(n or 0) for n in ns)) for key, *ns in rows]
    total = tuple(sum(column) for column in zip(*(ns for _, ns in sums), strict=True))

    def cells(key: str, ns: tuple[float, ...]) -> list[str]:
        heard, heard_usd, spoken, spoken_usd = ns
        return [key, f"{heard:,.1f}", f"{heard_usd:,.4f}", f"{spoken:,.0f}", f"{spoken_usd:,.4f}"]

    body = [cells(key, ns) for key, ns in sums]
    return ["Voice", *_render([by, *_VOICE_HEADER], body, [cells("TOTAL", total)])]


def _render(header: list[str], body: list[list[str]], totals: list[list[str]]) -> list[str]:
    """A table's lines: its first column left-aligned, the others right-aligned,
    a rule under the header and another above the totals."""
    table = [header, *body, *totals]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def render(line: list[str]) -> str:
        first_cell = line[0].ljust(widths[0])
        return "  ".join(
            [first_cell, *(c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True))]
        )

    rule = "  ".join("-" * w for w in widths)
    return [render(header), rule, *(render(line) for line in body), rule,
            *(render(line) for line in totals)]  # fmt: skip


def _unknown_note(whole: Sums) -> str:
    """The line under a report with calls whose server reported no cache figures."""
    unknown = whole.calls - whole.known
    marked = f" ({PARTIAL}: of the other calls only)" if whole.known else ""
    return (
        f"Cache figures of {unknown:,} call(s) are {UNKNOWN}: their model server reported "
        f"none{marked}."
    )
