"""The recall block: the traces and page chunks most relevant to a new message.

One line each, in the seed's wording:

    [user, 26 days ago, 2026-10-14] I moved to Lisbon
    [Ana Lima, yesterday, 2026-11-28] see you at the harbour
    [note concepts/notes, 2d ago, 2026-11-07] Prefers tea to coffee.
    [2026-01-03] a trace stored with no speaker carries the date alone

Ranking, without a model:
1. The message's words less stop words are looked up one by one in the index
   of the session's scopes (porter stemmer; a word with the rows of an earlier
   one is the same stem and counts once).
2. A row scores BM25 (k1 1.2, b 0.75) with the statistics of those scopes, each
   term's IDF squared: a rare word says far more about what is asked than a
   common one, such as a name said in every other greeting.
3. A trace also takes the words of the traces around it in the same
   conversation: a query word counts half its weight in the trace just
   before or after, a quarter in the one two away (an answer rarely repeats
   the words of its question), and the trace right after a question (a line
   ending in "?") takes the question's words whole. Each word counts once, at
   the best of these, with the length factor of the trace that holds it; words
   from different neighbours add up.
4. A trace longer than a page chunk (CHUNK_CHARS) ranks by its score spread
   over the chunks its text would fill: a long reply that takes its question's
   words costs several lines of the budget, and is weighed as several lines.
5. The best rows fill the budget, whole lines first; a tie goes to the newer row.

On the LoCoMo sample (short chat lines between two friends) and the
LongMemEval sample (user requests and long assistant answers), `bench/recall.py`
prints the figures, over all the questions and over a held-out half not looked
at while tuning.

The chosen lines are written oldest first: the model reads them as a story,
with the dates in the labels counting up, and a later line can correct an
earlier one the way a later message corrects an earlier one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from bot.memory.store import CHUNK_CHARS, SCOPE_BITS, WORD, Postings, Row, TraceStore

MAX_TERMS = 24  # words of a message looked up
CANDIDATES = 2000  # rows read per term, newest first
SHORTLIST = 40  # best rows read in full and scored with their neighbours
K1 = 1.2
B = 0.75
IDF_POWER = 2.0
SHARES = (0.5, 0.25)  # of a word's weight in a neighbour, by distance; len() is the window
ANSWER = 1.0  # of a word's weight in a question, for the trace right after it
NEIGHBOUR_GAP = 3600.0  # seconds: traces further apart are not neighbours

# Function words (NLTK's English list), and the pieces an apostrophe leaves.
_STOP_TEXT = (
    "a about above after again against all am an and any are as at be because been before "
    "being below between both but by can could did do does doing down during each few for "
    "from further had has have having he her here hers herself him himself his how i if in "
    "into is it its itself just me more most my myself no nor not now of off on once only or "
    "other our ours ourselves out over own same she should so some such than that the their "
    "theirs them themselves then there these they this those through to too under until up "
    "very was we were what when where which while who whom why will with would you your "
    "yours yourself yourselves s t d ll m re ve don didn doesn isn wasn weren won wouldn "
    "couldn shouldn"
)
STOP_WORDS = frozenset(_STOP_TEXT.split())

_UNSAFE_IN_LABEL = re.compile(r"[\[\],\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def query_terms(query: str) -> list[str]:
    """The distinct words of `query` that can select a memory: lower case, stop
    words dropped, in order of first use; of a long message only the MAX_TERMS
    longest (a long word is most often a rare one), so that a pasted page costs
    no more than a sentence."""
    words = (w.lower() for w in WORD.findall(query))
    terms = list(dict.fromkeys(w for w in words if w not in STOP_WORDS))
    if len(terms) > MAX_TERMS:
        kept = set(sorted(terms, key=len, reverse=True)[:MAX_TERMS])
        terms = [t for t in terms if t in kept]
    return terms


def one_line(text: str) -> str:
    """`text` with every line break turned into a space."""
    return " ".join(text.splitlines())


def _days(then: float, now: float) -> int:
    delta = datetime.fromtimestamp(now, UTC).date() - datetime.fromtimestamp(then, UTC).date()
    return max(0, delta.days)


def trace_age(then: float, now: float) -> str:
    """`today`, `yesterday` or `N days ago`, in UTC calendar days (a time
    after `now` is today)."""
    days = _days(then, now)
    return "today" if days == 0 else "yesterday" if days == 1 else f"{days} days ago"


def note_age(then: float, now: float) -> str:
    """`today` or `Nd ago` (`1d ago` for yesterday), in UTC calendar days: the
    short form the seed gives notes."""
    days = _days(then, now)
    return "today" if days == 0 else f"{days}d ago"


def clean_name(name: str) -> str:
    """A name fit for a label: brackets, commas and line breaks removed, spaces
    squeezed."""
    return " ".join(_UNSAFE_IN_LABEL.sub(" ", name).split())


def label(row: Row, now: float, group: bool) -> str:
    """The `[...]` label of a row. A note: `note`, its page id, age, date. A
    trace: its speaker (`user`/`assistant`, or in a group the sender's display
    name, falling back to the speaker when the name is empty), age, date; a
    trace with no speaker: the date alone."""
    date = datetime.fromtimestamp(row.created_at, UTC).strftime("%Y-%m-%d")
    if row.page is not None:
        return f"[note {clean_name(row.page)}, {note_age(row.created_at, now)}, {date}]"
    if row.speaker is None:
        return f"[{date}]"
    who = (clean_name(row.name) if group else "") or row.speaker
    return f"[{who}, {trace_age(row.created_at, now)}, {date}]"


_SHORTEST_LINE = len("[2026-01-01] x")  # a trace with no speaker and one character


def render(rows: Sequence[Row], budget_tokens: int, now: float, group: bool) -> str:
    """The block for `rows` (most relevant first) within `budget_tokens`, as
    `bot.chat.history.count_tokens` (characters / 4) counts the whole block: every
    row whose whole line still fits is taken, in order, and the lines taken are
    written oldest first. When no whole line fits, the block is the first row's
    line cut to the budget, or its text alone cut to the budget when even its
    label does not fit."""
    if budget_tokens <= 0 or not rows:
        return ""
    limit = budget_tokens * 4 + 3  # the most characters count_tokens allows
    taken: list[tuple[Row, str]] = []
    used = -1  # characters so far, with a newline before every line but the first
    for row in rows:
        if used + 1 + _SHORTEST_LINE > limit:
            break  # the block is full: no line fits any more
        line = f"{label(row, now, group)} {one_line(row.text)}"
        if used + 1 + len(line) <= limit:
            taken.append((row, line))
            used += 1 + len(line)
    if taken:
        taken.sort(key=lambda pair: (pair[0].created_at, pair[0].id))
        return "\n".join(line for _, line in taken)
    head, text = label(rows[0], now, group), one_line(rows[0].text)
    return f"{head} {text}"[:limit] if len(head) + 1 < limit else text[:limit]


def _weights(terms: Sequence[str], postings: Postings) -> dict[str, float]:
    """Each term's weight, its IDF over the searched scopes to the IDF_POWER;
    none for a term no row holds or one holding the rows of an earlier term."""
    total = max(1, postings.rows)
    weights: dict[str, float] = {}
    seen: set[tuple[int, ...]] = set()
    for term in terms:
        ids = tuple(postings.ids[term])
        if ids and ids not in seen:
            seen.add(ids)
            df = postings.df[term]
            weights[term] = math.log(1 + (total - df + 0.5) / (df + 0.5)) ** IDF_POWER
    return weights


def _shortlist(weights: dict[str, float], postings: Postings) -> list[int]:
    """The SHORTLIST best row ids by a rough score: the weights of the terms a
    row holds, plus a share of the rough score of the ids next to it."""
    rough: dict[int, float] = {}
    for term, weight in weights.items():
        for row_id in postings.ids[term]:
            rough[row_id] = rough.get(row_id, 0.0) + weight
    near = {
        i: w + SHARES[0] * max(rough.get(i - 1, 0.0), rough.get(i + 1, 0.0))
        for i, w in rough.items()
    }
    return sorted(near, key=lambda i: (-near[i], -i))[:SHORTLIST]


def _neighbours(a: Row, b: Row) -> bool:
    """Whether two rows next to each other by id are turns of one conversation."""
    return (
        a.page is None
        and b.page is None
        and a.id >> SCOPE_BITS == b.id >> SCOPE_BITS
        and a.session == b.session
        and abs(a.created_at - b.created_at) <= NEIGHBOUR_GAP
    )


def _score(
    rows: Sequence[Row], shortlist: Sequence[int], weights: dict[str, float], postings: Postings
) -> list[tuple[Row, float]]:
    """Each row with its score: for every query term, the best of its weight in
    the row itself and its share of the term's weight in a neighbour read around
    a shortlisted row (each weight with the length factor of the row that holds
    it, term frequency taken as 1: chat lines are short); the sum over terms."""
    read = {row.id for row in rows}  # a few hundred rows; a term's postings run to thousands
    holders = {term: read.intersection(postings.ids[term]) for term in weights}
    average = max(1.0, postings.words / max(1, postings.rows))
    ordered = sorted(rows, key=lambda r: r.id)
    held: list[dict[str, float]] = []  # term -> its weight in the row
    for row in ordered:
        norm = (K1 + 1) / (1 + K1 * (1 - B + B * row.words / average))
        held.append({t: w * norm for t, w in weights.items() if row.id in holders[t]})
    best = [dict(terms) for terms in held]
    listed = set(shortlist)

    def lend(to: int, frm: int, share: float) -> None:
        for term, weight in held[frm].items():
            best[to][term] = max(best[to].get(term, 0.0), share * weight)

    for n, row in enumerate(ordered):
        if row.id not in listed:  # only a shortlisted row has all its neighbours read
            continue
        for step in (-1, 1):
            m = n
            for k, share in enumerate(SHARES):
                m += step
                if not 0 <= m < len(ordered) or not _neighbours(ordered[m - step], ordered[m]):
                    break
                # the reply right after a question takes ANSWER, not the share
                reply = k == 0 and ordered[min(n, m)].text.rstrip().endswith("?")
                lend(m, n, ANSWER if reply and m > n else share)
                lend(n, m, ANSWER if reply and n > m else share)
    return [(row, sum(terms.values())) for row, terms in zip(ordered, best, strict=True)]


def _per_chunk(score: float, row: Row) -> float:
    """`score` spread over the page chunks a long row's text would fill: a row
    up to CHUNK_CHARS keeps it whole, a longer one takes CHUNK_CHARS / length."""
    return score * min(1.0, CHUNK_CHARS / max(1, len(row.text)))


def _skipped(row: Row, skip_after: float | None, skip_session: str | None) -> bool:
    """Whether `row` is a trace the history holds already (see `rank`)."""
    if skip_after is None or row.page is not None or row.created_at < skip_after:
        return False
    return skip_session is None or row.session == skip_session


async def rank(
    store: TraceStore,
    *,
    soul: str,
    scopes: Sequence[str],
    query: str,
    skip_after: float | None = None,
    skip_session: str | None = None,
) -> list[Row]:
    """The rows of the soul's `scopes` that are relevant to `query`, most
    relevant first (see the module docstring). Traces created at or after
    `skip_after` are left out (with `skip_session`, only that session's: a
    member's scope holds what they said in other channels too); page chunks
    never are."""
    terms = query_terms(query)
    if not terms:
        return []
    postings = await store.search(soul, scopes, terms, CANDIDATES, skip_after, skip_session)
    weights = _weights(terms, postings)
    shortlist = _shortlist(weights, postings)
    if not shortlist:
        return []
    rows = await store.rows(shortlist, around=len(SHARES))
    scored = [  # a neighbour may be in the history
        (row, _per_chunk(score, row))
        for row, score in _score(rows, shortlist, weights, postings)
        if score > 0 and not _skipped(row, skip_after, skip_session)
    ]
    scored.sort(key=lambda pair: (-pair[1], -pair[0].created_at, -pair[0].id))
    return [row for row, _ in scored]


async def recall_block(
    store: TraceStore,
    *,
    soul: str,
    scopes: Sequence[str],
    query: str,
    budget_tokens: int,
    now: float,
    group: bool,
    skip_after: float | None = None,
    skip_session: str | None = None,
) -> str:
    """The recall block for a new message `query` in a session that reaches
    `scopes` (its own scope and "shared"): the most relevant traces and page
    chunks, one line each, within `budget_tokens`; "" when nothing matches.
    Traces created at or after `skip_after` (of `skip_session` alone, when
    given) are already in the history and are left out. `group` labels traces
    with the sender's display name rather than `user`/`assistant`. Raises what
    `TraceStore` raises."""
    if budget_tokens <= 0:
        return ""
    rows = await rank(store, soul=soul, scopes=scopes, query=query, skip_after=skip_after,
                      skip_session=skip_session)  # fmt: skip
    return render(rows, budget_tokens, now, group)
