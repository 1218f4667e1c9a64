"""The text index of `memory`, on each engine: which rows hold a word.

SQLite: the FTS5 table `memory_fts` over `memory.text`, tokenizer `porter
unicode61 remove_diacritics 2`, kept beside the rows (external content). A
search of one scope reads a rowid range of a term's doclist.

PostgreSQL: the column `memory.terms`, a tsvector filled here with the words
as FTS5 makes them (`terms`: Unicode letters and digits, lower case, Latin
diacritics dropped, Porter's stemmer from snowballstemmer, whose `porter` is
the algorithm FTS5 implements), plus the lexeme `_s<number>` of the row's scope.
PostgreSQL's own parsers are not used: they split, stem and drop stop words
otherwise, and recall must rank alike on both engines. A search asks the GIN
index for `'word' & '_s<number>'`: the intersection of the word's rows and the
scope's, newest first. All (word, scope) pairs of one search are one statement.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable, Sequence

import snowballstemmer

from bot.storage.sql import Conn

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


def scope_lexeme(number: int) -> str:
    """The lexeme every row of scope `number` carries (PostgreSQL)."""
    return f"_s{number}"


def _query(term: str, number: int) -> str:
    return f"'{stem(term)}' & '{scope_lexeme(number)}'"


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
        "AS w(n, q, lo, hi) CROSS JOIN LATERAL (SELECT id FROM memory WHERE terms @@ w.q::tsquery "
        "AND id BETWEEN w.lo AND w.hi ORDER BY id DESC LIMIT ?) AS m ORDER BY w.n, m.id DESC",
        (
            list(range(len(wanted))),
            [_query(t, n) for t, n, _, _ in wanted],
            [lo for _, _, lo, _ in wanted],
            [hi for _, _, _, hi in wanted],
            limit,
        ),
    )
    for n, row_id in rows:
        term, number, _, _ = wanted[n]
        found[term, number].append(int(row_id))
    return found


def index(conn: Conn, rows: Sequence[tuple[int, str]]) -> None:
    """Index the text of new `memory` rows (id, text) on SQLite; PostgreSQL's
    rows carry their terms (`lexemes`), written with the row."""
    if conn.engine == "sqlite":
        conn.executemany("INSERT INTO memory_fts (rowid, text) VALUES (?, ?)", rows)


def lexemes(number: int, words: Iterable[str]) -> list[str]:
    """What a PostgreSQL row of scope `number` holds in `terms`."""
    return [*terms(words), scope_lexeme(number)]


def unindex(conn: Conn, where: str, params: Sequence[object]) -> None:
    """Drop the index entries of the `memory` rows `where` selects, before the
    rows are deleted (SQLite's external content; PostgreSQL's go with the row)."""
    if conn.engine == "sqlite":
        conn.execute(
            "INSERT INTO memory_fts (memory_fts, rowid, text) "
            f"SELECT 'delete', id, text FROM memory WHERE {where}",
            params,
        )
