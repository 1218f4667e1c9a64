"""The text index of `memory`, on each engine: which rows hold a word.

SQLite: the FTS5 table `memory_fts` over `memory.text`, tokenizer `porter
unicode61 remove_diacritics 2`, kept beside the rows (external content). A
search of one scope reads a rowid range of a term's doclist.

PostgreSQL: the table `memory_terms`, one (term, id) pair per distinct word of
a row, the words as FTS5 makes them (`terms`: Unicode letters and digits,
lower case, Latin diacritics dropped, Porter's stemmer from snowballstemmer,
whose `porter` is the algorithm FTS5 implements). PostgreSQL's own parsers
are not used: they split, stem and drop stop words otherwise, and recall must
rank alike on both engines. A search reads the B-tree of (term, id) backwards
over one scope's id range: the newest rows first, from the index alone. (A
tsvector column with a GIN index was measured first: a GIN gives heap
pointers, not ids, and a scope's rows lie scattered through the heap, so a
common word cost a heap page per row: bench/recall_scale.py at 100,000
traces gave p50 25 ms, against SQLite's 7.7 and the B-tree's 9.3.) All (word,
scope) pairs of one search are one statement.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence

import snowballstemmer

from bot.storage.sql import Conn

WORD = re.compile(r"[^\W_]+")  # a word as FTS5's unicode61 splits it

WORD_CHARS = 200  # a longer word is indexed and searched by its first 200 characters
_STEMMER = snowballstemmer.stemmer("porter")


def _fold(word: str) -> str:
    """Lower case, Latin diacritics dropped (FTS5's remove_diacritics 2)."""
    lowered = word.lower()
    if lowered.isascii():
        return lowered
    return "".join(
        c for c in unicodedata.normalize("NFKD", lowered) if not unicodedata.combining(c)
    )


@functools.lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """One word as the index holds it."""
    return str(_STEMMER.stemWord(_fold(word)))[:WORD_CHARS]


def terms(words: Iterable[str]) -> list[str]:
    """The distinct index terms of `words` (a text's words, as `WORD` splits)."""
    return list(dict.fromkeys(t for w in words if (t := stem(w))))


def find(
    conn: Conn, wanted: Sequence[tuple[str, int, int, int]], limit: int
) -> dict[tuple[str, int], list[int]]:
    """For each (word, scope number, first id, last id) of `wanted`, the ids
    of the scope's rows holding the word, newest first, at most `limit`."""
    found: dict[tuple[str, int], list[int]] = {(t, n): [] for t, n, _, _ in wanted}
    if conn.engine == "sqlite":
        for term, number, lo, hi in wanted:
            found[term, number] = [
                int(rowid)
                for (rowid,) in conn.execute(
                    "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? "
                    "AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT ?",
                    ('"' + term.replace('"', '""') + '"', lo, hi, limit),
                )
            ]
        return found
    if not wanted:
        return found
    rows = conn.execute(
        "SELECT w.n, m.id FROM unnest(?::int[], ?::text[], ?::bigint[], ?::bigint[]) "
        "AS w(n, term, lo, hi) CROSS JOIN LATERAL (SELECT id FROM memory_terms "
        "WHERE term = w.term AND id BETWEEN w.lo AND w.hi ORDER BY id DESC LIMIT ?) AS m",
        (
            list(range(len(wanted))),
            [stem(t) for t, _, _, _ in wanted],
            [lo for _, _, lo, _ in wanted],
            [hi for _, _, _, hi in wanted],
            limit,
        ),
    )
    for n, row_id in rows:
        term, number, _, _ = wanted[n]
        found[term, number].append(int(row_id))
    for ids in found.values():
        ids.sort(reverse=True)
    return found


def _pairs(rows: Iterable[tuple[int, str]]) -> tuple[list[str], list[int]]:
    """The (term, id) pairs of `rows` (id, text), as two lists."""
    terms_, ids = [], []
    for row_id, text in rows:
        for term in terms(WORD.findall(text)):
            terms_.append(term)
            ids.append(row_id)
    return terms_, ids


def index(conn: Conn, rows: Sequence[tuple[int, str]]) -> None:
    """Index the text of new `memory` rows (id, text)."""
    if conn.engine == "sqlite":
        conn.executemany("INSERT INTO memory_fts (rowid, text) VALUES (?, ?)", rows)
        return
    conn.execute(
        "INSERT INTO memory_terms (term, id) SELECT * FROM unnest(?::text[], ?::bigint[])",
        _pairs(rows),
    )


def unindex(conn: Conn, where: str, params: Sequence[object]) -> None:
    """Drop the index entries of the `memory` rows `where` selects, before the
    rows are deleted."""
    if conn.engine == "sqlite":
        conn.execute(
            "INSERT INTO memory_fts (memory_fts, rowid, text) "
            f"SELECT 'delete', id, text FROM memory WHERE {where}",
            params,
        )
        return
    found = conn.execute(f"SELECT id, text FROM memory WHERE {where}", params).fetchall()
    conn.execute(
        "DELETE FROM memory_terms WHERE (term, id) IN "
        "(SELECT * FROM unnest(?::text[], ?::bigint[]))",
        _pairs(found),
    )
