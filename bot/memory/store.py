"""The trace store: traces and wiki page chunks in SQLite, with an FTS5 index.

Every user message and every reply is one trace of a soul and a scope
(`shared`, `user:<platform>:<id>`, `chat:<platform>:<id>`); a chunk of a wiki
page is a note of the scope whose wiki holds the page. Only the text is
indexed: speaker, display name, soul, scope, session and time are columns of
`memory`, never tokens of `memory_fts`, so a search never matches who spoke.

Layout (the tables are in `bot.storage.db.SCHEMA`):
- `memory_scopes`: one numbered row per (soul, scope), with its row and word
  counts (the statistics the ranking needs) and its newest trace id.
- `memory`: one row per trace or note. Its id is `(scope number << 32) + seq`,
  so the rows of a scope are one contiguous id range. FTS5 keeps each term's
  rows sorted by rowid and seeks a rowid range, so a search of one scope reads
  that scope's part of the index only, however many rows other scopes hold.
  Within a scope ids grow with time, which is what the compile's watermark needs.
- the text index: FTS5's `memory_fts` on SQLite, the tsvector `memory.terms`
  on PostgreSQL (bot/memory/textindex.py).
- `memory_folds`: which traces a compile folded into which page (trace id, page
  id). The key leads with the trace, so one wiki's folds are one id range; a page
  id means a page of the wiki of the scope its traces belong to.
- `memory_erasures`: each (soul, scope)'s erase epoch, bumped by `forget` and
  `drop_page` (bot/cluster/wikilock.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass
from typing import Any

from bot.errors import ScopeErased
from bot.memory import textindex
from bot.storage.db import Database
from bot.storage.sql import Conn

SCOPE_BITS = 32
WORD = textindex.WORD
CHUNK_CHARS = 600  # a page chunk is at most this long (about 150 tokens)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n---[ \t]*(\n|\Z)", re.DOTALL)
_ROW = "id, session, speaker, name, page, text, created_at, words"
_TRACE = "id, session, speaker, name, text, created_at, entities"  # read back by `_trace`
# The ids of the traces nearest a row on one side, within its scope.
_NEAR = "SELECT id FROM (SELECT id FROM memory WHERE id {} ? AND id {} ? AND page IS NULL ORDER BY id {} LIMIT ?) AS near"  # noqa: E501


@dataclass(frozen=True)
class NewTrace:
    """A trace to store. `speaker` is "user", "assistant" or None (unknown);
    `name` is the display name of who spoke ("" when unknown)."""

    soul: str
    scope: str
    session: str
    speaker: str | None
    name: str
    text: str
    created_at: float  # unix seconds
    entities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Trace:
    """A stored trace: its id (growing with time within its scope), then the
    fields of its `NewTrace`."""

    id: int
    soul: str
    scope: str
    session: str
    speaker: str | None
    name: str
    text: str
    created_at: float
    entities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    """A trace or a page chunk as recall reads it. `page` is the page id of a
    chunk and None for a trace; a chunk's `created_at` is the page's update time."""

    id: int
    session: str
    speaker: str | None
    name: str
    page: str | None
    text: str
    created_at: float
    words: int


@dataclass(frozen=True)
class Postings:
    """What a search found in a set of scopes: for each term the ids of the rows
    holding it (newest first, at most the limit asked) and how many rows hold
    it (estimated past the limit); the row and word totals of those scopes."""

    ids: dict[str, list[int]]
    df: dict[str, float]
    rows: int
    words: int


def count_words(text: str) -> int:
    """The words of `text` as the index splits them (letters and digits)."""
    return len(WORD.findall(text))


def chunk_page(body: str, limit: int = CHUNK_CHARS) -> list[str]:
    """A page body cut into chunks of at most `limit` characters: front matter
    dropped, paragraphs kept whole and packed together while they fit, a longer
    paragraph cut at spaces (a single word longer than `limit` is cut anywhere)."""
    pieces: list[str] = []
    for paragraph in re.split(r"\n[ \t]*\n", _FRONT_MATTER.sub("", body, count=1)):
        paragraph = paragraph.strip()
        while len(paragraph) > limit:
            cut = paragraph.rfind(" ", 0, limit + 1)
            cut = cut if cut > 0 else limit
            pieces.append(paragraph[:cut].strip())
            paragraph = paragraph[cut:].strip()
        if paragraph:
            pieces.append(paragraph)
    chunks: list[str] = []
    for piece in pieces:
        if chunks and len(chunks[-1]) + 2 + len(piece) <= limit:
            chunks[-1] += "\n\n" + piece
        else:
            chunks.append(piece)
    return chunks


def _trace(soul: str, scope: str, r: Sequence[Any]) -> Trace:
    """The trace of a `memory` row read as the columns `_TRACE`."""
    return Trace(r[0], soul, scope, r[1], r[2], r[3], r[4], r[5], tuple(json.loads(r[6])))


def _range(number: int) -> tuple[int, int]:
    """The first and last id of scope `number`."""
    return number << SCOPE_BITS, ((number + 1) << SCOPE_BITS) - 1


def _span(conn: Conn, soul: str, scope: str) -> tuple[int, int] | None:
    """The id range of the soul's `scope`; None when it has none yet."""
    number = _numbers(conn, soul, [scope]).get(scope)
    return None if number is None else _range(number)


def _numbers(conn: Conn, soul: str, scopes: Iterable[str]) -> dict[str, int]:
    """The numbers of those of the soul's `scopes` that have one."""
    return {scope: number for scope, number, _, _ in _scope_rows(conn, soul, scopes)}


def _scope_rows(conn: Conn, soul: str, scopes: Iterable[str]) -> list[tuple[str, int, int, int]]:
    """(scope, number, rows, words) of those of the soul's `scopes` that have a
    number, sorted by scope.

    Each scope is asked for by its whole key, (soul, scope), so every plan
    reads one index entry a scope. With `soul = ? AND scope IN (...)`,
    PostgreSQL's plan for the prepared statement, made while the table was
    small, read the index by soul alone and filtered every scope of the soul
    until an ANALYZE replanned it (docs/architecture.md)."""
    wanted = list(dict.fromkeys(scopes))
    if not wanted:
        return []
    rows = conn.execute(
        "SELECT scope, id, rows, words FROM memory_scopes WHERE "
        + " OR ".join(["(soul = ? AND scope = ?)"] * len(wanted))
        + " ORDER BY scope",
        [value for scope in wanted for value in (soul, scope)],
    )
    return [(scope, int(number), int(n), int(words)) for scope, number, n, words in rows]


def _fresh_ids(
    conn: Conn, soul: str, scope: str, n: int, words: int | None = None
) -> tuple[int, list[int]]:
    """The number of (soul, scope), made on first use, and `n` new ids of it.
    With `words` (new traces), the same statement counts the `n` rows and their
    words in the scope and makes the last new id its newest trace."""
    bump = "UPDATE memory_scopes SET next_seq = next_seq + ?"
    params: tuple[object, ...] = (n,)
    if words is not None:  # the last new id: the old next_seq, plus n
        bump += (
            ", rows = rows + ?, words = words + ?, "
            f"last_trace = (id << {SCOPE_BITS}) + next_seq + ?"
        )
        params += (n, words, n)
    bump += " WHERE soul = ? AND scope = ? RETURNING id, next_seq"
    params += (soul, scope)
    row = conn.execute(bump, params).fetchone()
    if row is None:  # its first use (inserted only then: PostgreSQL spends an id on a conflict)
        conn.execute(
            "INSERT INTO memory_scopes (soul, scope) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (soul, scope),
        )
        row = conn.execute(bump, params).fetchone()
    number, seq = int(row[0]), int(row[1])
    first = (number << SCOPE_BITS) + seq - n + 1
    return number, list(range(first, first + n))


def _insert(conn: Conn, rows: Sequence[Row], entities: Sequence[tuple[str, ...]]) -> None:
    """Insert `memory` rows (with each row's entities) and index their text."""
    values = [(*astuple(r), json.dumps(e)) for r, e in zip(rows, entities, strict=True)]
    conn.executemany(
        f"INSERT INTO memory ({_ROW}, entities) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values
    )
    textindex.index(conn, [(r.id, r.text) for r in rows])


def _delete(conn: Conn, where: str, params: Sequence[object]) -> tuple[int, int, int]:
    """Delete the `memory` rows `where` selects, and their index entries.
    Returns the traces, rows and words deleted."""
    traces, rows, words = conn.execute(
        f"SELECT COUNT(*) - COUNT(page), COUNT(*), COALESCE(SUM(words), 0) FROM memory "
        f"WHERE {where}",
        params,
    ).fetchone()
    textindex.unindex(conn, where, params)
    conn.execute(f"DELETE FROM memory WHERE {where}", params)
    return int(traces), int(rows), int(words)


def _df(conn: Conn, number: int, got: list[int], limit: int) -> float:
    """How many rows of scope `number` hold a term, from the newest `got` that
    do: exact below `limit`, else scaled by the share of the scope's ids they span."""
    if len(got) < limit:
        return float(len(got))
    (first,) = conn.execute(
        "SELECT MIN(id) FROM memory WHERE id BETWEEN ? AND ?", _range(number)
    ).fetchone()
    return len(got) * max(1.0, (got[0] - int(first) + 1) / (got[0] - got[-1] + 1))


def _recallable(conn: Conn, numbers: Iterable[int], start: float, session: str | None) -> bool:
    """Whether scopes `numbers` hold a page chunk, a trace older than `start`
    or (with `session`) a trace of another session (a new conversation, all of
    it still in the history, has nothing to recall)."""
    other = "" if session is None else " OR session <> ?"
    for number in numbers:
        lo, hi = _range(number)
        if conn.execute(
            "SELECT 1 FROM memory WHERE id BETWEEN ? AND ? "
            f"AND (page IS NOT NULL OR created_at < ?{other}) LIMIT 1",
            (lo, hi, start) + (() if session is None else (session,)),
        ).fetchone():
            return True
    return False


def _since(conn: Conn, numbers: Iterable[int], start: float, session: str | None) -> set[int]:
    """The ids of the traces of scopes `numbers` created at or after `start`
    (of `session` alone, when given). Ids follow time within a scope, so only
    the newest rows are read: those after the last trace older than `start`."""
    mine = "" if session is None else " AND session = ?"
    found: set[int] = set()
    for number in numbers:
        lo, hi = _range(number)
        before = conn.execute(
            "SELECT id FROM memory WHERE id BETWEEN ? AND ? AND page IS NULL AND created_at < ? "
            "ORDER BY id DESC LIMIT 1",
            (lo, hi, start),
        ).fetchone()
        rows = conn.execute(
            "SELECT id FROM memory WHERE id > ? AND id <= ? AND page IS NULL "
            f"AND created_at >= ?{mine}",
            (before[0] if before else lo, hi, start) + (() if session is None else (session,)),
        )
        found.update(i for (i,) in rows)
    return found


def _epoch(conn: Conn, soul: str, scope: str) -> int:
    row = conn.execute(
        "SELECT epoch FROM memory_erasures WHERE soul = ? AND scope = ?", (soul, scope)
    ).fetchone()
    return int(row[0]) if row else 0


def _bump_epoch(conn: Conn, soul: str, scope: str) -> None:
    conn.execute(
        "INSERT INTO memory_erasures (soul, scope, epoch) VALUES (?, ?, 1) "
        "ON CONFLICT (soul, scope) DO UPDATE SET epoch = memory_erasures.epoch + 1",
        (soul, scope),
    )


class TraceStore:
    """Traces and page chunks on the shared database. Every method is one call
    on the database thread; each raises RuntimeError when the database is closed
    and the engine's error (sqlite3.Error, psycopg.Error) when it fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @property
    def db(self) -> Database:
        """The database the store is on."""
        return self._db

    async def add(self, traces: Sequence[NewTrace]) -> list[int]:
        """Store `traces` in one transaction; returns their ids, in order."""

        def write(conn: Conn) -> list[int]:
            groups: dict[tuple[str, str], list[int]] = {}
            for n, trace in enumerate(traces):
                groups.setdefault((trace.soul, trace.scope), []).append(n)
            ids = [0] * len(traces)
            with conn.transaction():
                for (soul, scope), members in groups.items():
                    words = sum(count_words(traces[n].text) for n in members)
                    _, fresh = _fresh_ids(conn, soul, scope, len(members), words)
                    for n, row_id in zip(members, fresh, strict=True):
                        ids[n] = row_id
                rows = [
                    Row(
                        i,
                        t.session,
                        t.speaker,
                        t.name,
                        None,
                        t.text,
                        t.created_at,
                        count_words(t.text),
                    )
                    for i, t in zip(ids, traces, strict=True)
                ]
                _insert(conn, rows, [t.entities for t in traces])
            return ids

        return await self._db.run(write) if traces else []

    async def after(self, soul: str, scope: str, after_id: int, limit: int = 10_000) -> list[Trace]:
        """The scope's traces with an id above `after_id`, oldest first, at most `limit`."""

        def query(conn: Conn) -> list[Trace]:
            span = _span(conn, soul, scope)
            if span is None:
                return []
            lo, hi = span
            rows = conn.execute(
                f"SELECT {_TRACE} FROM memory "
                "WHERE id > ? AND id <= ? AND page IS NULL ORDER BY id LIMIT ?",
                (max(after_id, lo), hi, limit),
            )
            return [_trace(soul, scope, r) for r in rows]

        return await self._db.run(query)

    async def traces(self, soul: str, scope: str, ids: Iterable[int]) -> list[Trace]:
        """Those of the traces `ids` the scope still holds, oldest first (an id
        of another scope, or of a trace erased since, is left out)."""
        wanted = sorted(set(ids))

        def query(conn: Conn) -> list[Trace]:
            lo, hi = _span(conn, soul, scope) or (0, -1)
            listed, param = conn.id_set(wanted)
            rows = conn.execute(
                f"SELECT {_TRACE} FROM memory WHERE id IN ({listed}) "
                "AND id BETWEEN ? AND ? AND page IS NULL ORDER BY id",
                (param, lo, hi),
            )
            return [_trace(soul, scope, r) for r in rows]

        return await self._db.run(query)

    async def scopes_after(self, soul: str, watermarks: Mapping[str, int]) -> list[str]:
        """The soul's scopes holding a trace past their watermark (a scope absent
        from `watermarks` has watermark 0), sorted."""

        def query(conn: Conn) -> list[str]:
            rows = conn.execute(
                "SELECT scope, last_trace FROM memory_scopes WHERE soul = ? ORDER BY scope", (soul,)
            )
            return [scope for scope, last in rows if last > watermarks.get(scope, 0)]

        return await self._db.run(query)

    async def sessions(self, soul: str, scope: str) -> list[str]:
        """The session keys the scope's traces came from, sorted."""

        def query(conn: Conn) -> list[str]:
            span = _span(conn, soul, scope) or (0, -1)
            rows = conn.execute(
                "SELECT DISTINCT session FROM memory WHERE id BETWEEN ? AND ? AND page IS NULL "
                "ORDER BY session",
                span,
            )
            return [session for (session,) in rows]

        return await self._db.run(query)

    async def index_page(
        self, soul: str, scope: str, page_id: str, body: str, updated: float,
        epoch: int | None = None,
    ) -> None:  # fmt: skip
        """Replace the indexed chunks of page `page_id` of the scope's wiki with
        the chunks of `body` (see `chunk_page`), dated `updated`. An empty body
        only removes the page's chunks. With `epoch`, raises ScopeErased (and
        writes nothing) when the scope's erase epoch is another now, checked in
        the transaction that writes."""
        chunks = chunk_page(body)

        def write(conn: Conn) -> None:
            with conn.transaction():
                if epoch is not None and _epoch(conn, soul, scope) != epoch:
                    raise ScopeErased(soul, scope)
                number, ids = _fresh_ids(conn, soul, scope, len(chunks))
                _, old_rows, old_words = _delete(
                    conn, "page = ? AND id BETWEEN ? AND ?", (page_id, *_range(number))
                )
                rows = [
                    Row(i, "", None, "", page_id, chunk, updated, count_words(chunk))
                    for i, chunk in zip(ids, chunks, strict=True)
                ]
                _insert(conn, rows, [()] * len(rows))
                conn.execute(
                    "UPDATE memory_scopes SET rows = rows + ?, words = words + ? WHERE id = ?",
                    (len(rows) - old_rows, sum(count_words(c) for c in chunks) - old_words, number),
                )

        await self._db.run(write)

    async def erase_epoch(self, soul: str, scope: str) -> int:
        """How many times the scope was erased (`forget`, a `drop_page` that
        took traces): a compile that saw another number prepared from traces
        that are gone (bot/cluster/wikilock.py). 0 for a scope never erased."""

        def query(conn: Conn) -> int:
            return _epoch(conn, soul, scope)

        return await self._db.run(query)

    async def forget(self, soul: str, scope: str) -> int:
        """Erase every trace, page chunk and fold record of the scope, and bump
        its erase epoch, in one transaction; returns the traces erased.
        The scope keeps its number, so later ids stay above every earlier one."""

        def erase(conn: Conn) -> int:
            with conn.transaction():
                span = _span(conn, soul, scope) or (0, -1)
                traces, _, _ = _delete(conn, "id BETWEEN ? AND ?", span)
                conn.execute("DELETE FROM memory_folds WHERE trace BETWEEN ? AND ?", span)
                conn.execute(
                    "UPDATE memory_scopes SET rows = 0, words = 0, last_trace = 0 "
                    "WHERE soul = ? AND scope = ?",
                    (soul, scope),
                )
                _bump_epoch(conn, soul, scope)
                return traces

        return await self._db.run(erase)

    async def count(self, soul: str, scope: str | None = None) -> int:
        """The traces of the soul's `scope`, or of all its scopes when None."""

        def query(conn: Conn) -> int:
            scopes = conn.execute(
                "SELECT id FROM memory_scopes WHERE soul = ?"
                + ("" if scope is None else " AND scope = ?"),
                (soul,) if scope is None else (soul, scope),
            ).fetchall()
            return sum(
                conn.execute(
                    "SELECT COUNT(*) FROM memory WHERE id BETWEEN ? AND ? AND page IS NULL",
                    _range(number),
                ).fetchone()[0]
                for (number,) in scopes
            )

        return await self._db.run(query)

    async def search(
        self,
        soul: str,
        scopes: Sequence[str],
        terms: Sequence[str],
        limit: int,
        skip_after: float | None = None,
        skip_session: str | None = None,
    ) -> Postings:
        """For each of `terms` (each one word, stemmed by the index as the text
        was), the ids of the rows of the soul's `scopes` holding it, newest
        first, at most `limit` per term and scope; traces created at or after
        `skip_after` (of session `skip_session` alone, when given) are left out
        of the ids (not out of the counts)."""

        def query(conn: Conn) -> Postings:
            found_scopes = _scope_rows(conn, soul, scopes)
            numbers = [number for _, number, _, _ in found_scopes]
            rows = sum(r for _, _, r, _ in found_scopes)
            words = sum(w for _, _, _, w in found_scopes)
            ids: dict[str, list[int]] = {}
            df: dict[str, float] = {}
            if skip_after is not None and not _recallable(conn, numbers, skip_after, skip_session):
                empty: dict[str, list[int]] = {term: [] for term in terms}
                return Postings(empty, dict.fromkeys(terms, 0.0), int(rows), int(words))
            skipped = (
                set() if skip_after is None else _since(conn, numbers, skip_after, skip_session)
            )
            found = textindex.find(
                conn, [(t, n, *_range(n)) for t in terms for n in numbers], limit
            )
            for term in terms:
                ids[term], df[term] = [], 0.0
                for number in numbers:
                    got = found[term, number]
                    ids[term] += [i for i in got if i not in skipped]
                    df[term] += _df(conn, number, got, limit)
            return Postings(ids, df, int(rows), int(words))

        return await self._db.run(query)

    async def rows(self, ids: Iterable[int], around: int = 0) -> list[Row]:
        """The rows with `ids`, and for each also up to `around` traces just
        before and just after it in its own scope, sorted by id."""
        wanted = list(dict.fromkeys(ids))

        def query(conn: Conn) -> list[Row]:
            listed, param = conn.id_set(wanted)
            parts = [listed]
            params: list[object] = [param]
            for row_id in wanted if around else ():
                lo, hi = _range(row_id >> SCOPE_BITS)
                parts += [_NEAR.format("<", ">=", "DESC"), _NEAR.format(">", "<=", "ASC")]
                params += [row_id, lo, around, row_id, hi, around]
            found = conn.execute(
                f"SELECT {_ROW} FROM memory WHERE id IN ({' UNION '.join(parts)}) ORDER BY id",
                params,
            )
            return [Row(*r) for r in found]

        return await self._db.run(query)

    async def record_folds(
        self, soul: str, scope: str, page_id: str, trace_ids: Sequence[int]
    ) -> None:
        """Record that the traces `trace_ids` of the scope were folded into its
        wiki's page `page_id`. Idempotent: a fold recorded twice is kept once.
        Raises ValueError for an id outside the scope (nothing is recorded then)."""

        def write(conn: Conn) -> None:
            lo, hi = _span(conn, soul, scope) or (0, -1)
            strays = [i for i in trace_ids if not lo <= i <= hi]
            if strays:
                raise ValueError(f"trace ids {strays} are not of scope {scope!r} of soul {soul!r}")
            with conn.transaction():
                conn.executemany(
                    "INSERT INTO memory_folds (trace, page) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    [(i, page_id) for i in trace_ids],
                )

        if trace_ids:
            await self._db.run(write)

    async def folded_into(self, soul: str, scope: str, page_id: str) -> list[int]:
        """The ids of the scope's traces folded into its page `page_id`, sorted."""

        def query(conn: Conn) -> list[int]:
            rows = conn.execute(
                "SELECT trace FROM memory_folds WHERE page = ? AND trace BETWEEN ? AND ? "
                "ORDER BY trace",
                (page_id, *(_span(conn, soul, scope) or (0, -1))),
            )
            return [int(i) for (i,) in rows]

        return await self._db.run(query)

    async def drop_page(self, soul: str, scope: str, page_id: str) -> list[Trace]:
        """Take page `page_id` of the scope's wiki out of the store, in one
        transaction: the traces folded into it (their rows, index entries and
        every fold record of theirs, into this page or another) and the page's
        chunks and fold records. Returns the dropped traces, oldest first. The
        page file and the log lines are the wiki's: see `Memory.drop_page`."""

        def write(conn: Conn) -> list[Trace]:
            span = _span(conn, soul, scope)
            if span is None:
                return []
            folded = (
                "page IS NULL AND id IN (SELECT trace FROM memory_folds "
                "WHERE page = ? AND trace BETWEEN ? AND ?)"
            )
            with conn.transaction():
                dropped = [
                    _trace(soul, scope, r)
                    for r in conn.execute(
                        f"SELECT {_TRACE} FROM memory WHERE {folded} ORDER BY id",
                        (page_id, *span),
                    )
                ]
                _, trace_rows, trace_words = _delete(conn, folded, (page_id, *span))
                _, chunk_rows, chunk_words = _delete(
                    conn, "page = ? AND id BETWEEN ? AND ?", (page_id, *span)
                )
                listed, param = conn.id_set(t.id for t in dropped)
                conn.execute(f"DELETE FROM memory_folds WHERE trace IN ({listed})", (param,))
                conn.execute(
                    "DELETE FROM memory_folds WHERE page = ? AND trace BETWEEN ? AND ?",
                    (page_id, *span),
                )
                conn.execute(
                    "UPDATE memory_scopes SET rows = rows - ?, words = words - ? "
                    "WHERE soul = ? AND scope = ?",
                    (trace_rows + chunk_rows, trace_words + chunk_words, soul, scope),
                )
                if dropped:
                    _bump_epoch(conn, soul, scope)
            return dropped

        return await self._db.run(write)

    async def newest(
        self, soul: str, scope: str, after_id: int, limit: int
    ) -> tuple[int, list[Trace]]:
        """How many of the scope's traces have an id above `after_id`, and the
        newest `limit` of them, oldest first (what `/memory` shows of the
        traces no compile has folded yet)."""

        def query(conn: Conn) -> tuple[int, list[Trace]]:
            span = _span(conn, soul, scope)
            if span is None:
                return 0, []
            window = (max(after_id, span[0]), span[1])
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM memory WHERE id > ? AND id <= ? AND page IS NULL", window
            ).fetchone()
            rows = conn.execute(
                f"SELECT {_TRACE} FROM memory WHERE id > ? AND id <= ? AND page IS NULL "
                "ORDER BY id DESC LIMIT ?",
                (*window, limit),
            )
            return int(count), [_trace(soul, scope, r) for r in rows][::-1]

        return await self._db.run(query)

    async def said_in(
        self, soul: str, scope: str, session: str, since: float
    ) -> list[tuple[Trace, list[str]]]:
        """The scope's traces from `session` made at `since` or later, oldest
        first, each with the pages of its wiki a compile folded it into."""

        def query(conn: Conn) -> list[tuple[Trace, list[str]]]:
            span = _span(conn, soul, scope)
            if span is None:
                return []
            traces = [
                _trace(soul, scope, r)
                for r in conn.execute(
                    f"SELECT {_TRACE} FROM memory WHERE id BETWEEN ? AND ? AND page IS NULL "
                    "AND session = ? AND created_at >= ? ORDER BY id",
                    (*span, session, since),
                )
            ]
            listed, param = conn.id_set(t.id for t in traces)
            folds: dict[int, list[str]] = {}
            for trace, page in conn.execute(
                f"SELECT trace, page FROM memory_folds WHERE trace IN ({listed}) ORDER BY page",
                (param,),
            ):
                folds.setdefault(int(trace), []).append(str(page))
            return [(t, folds.get(t.id, [])) for t in traces]

        return await self._db.run(query)

    async def delete_traces(self, soul: str, scope: str, ids: Sequence[int]) -> int:
        """Delete the scope's traces `ids` (their rows, index entries and fold
        records) and move its erase epoch, in one transaction; returns how many
        went. An id outside the scope is left alone."""

        def write(conn: Conn) -> int:
            span = _span(conn, soul, scope)
            wanted = [i for i in ids if span is not None and span[0] <= i <= span[1]]
            if not wanted:
                return 0
            listed, param = conn.id_set(wanted)
            with conn.transaction():
                traces, rows, words = _delete(conn, f"page IS NULL AND id IN ({listed})", (param,))
                conn.execute(f"DELETE FROM memory_folds WHERE trace IN ({listed})", (param,))
                conn.execute(
                    "UPDATE memory_scopes SET rows = rows - ?, words = words - ? "
                    "WHERE soul = ? AND scope = ?",
                    (rows, words, soul, scope),
                )
                _bump_epoch(conn, soul, scope)
            return traces

        return await self._db.run(write)
