"""The first stage of ambient mode: a scorer without a model, run on every
message of an `ambient` channel (docs/groups.md).

It reads the channel's last lines (the persona's own among them) and gives the
newest a figure from 0 to 1 and the names of the signals behind it, nothing of
the text. The signals, each simple enough to explain to the people in the
channel:

- `name`: the persona's name, its first name or its id, as a word: enough on
  its own when the persona is called (the name opens the message before a comma,
  after a greeting, or closes it; or the message asks something or says "you"),
  not when it is only talked about;
- `follow_up`: within FOLLOW_UP_S of the persona's own message, a question
  back from the person it was answering (others may have spoken between), or,
  with nobody else between, a question in the second person, a "you" said to
  it, or an answer to a question it asked;
- `topic`: words of the persona's role (its `role`, the front matter's
  `description`) in the message, much more in a question;
- `unanswered`: a question to the room that nobody else has answered, once a
  message comes `unanswered_after_s` or more after it (the messages' own
  timestamps, never the wall clock).

A question is a question mark, a message that opens as a question does, or one
that says something does not work ("can't", "stopped", "error", ...).

And three that silence it: thanks, agreement and laughter (`ack`); and, unless
the persona is named, a message that answers or names another member
(`to_other`), or the latest turn of a back-and-forth between two other members,
each within SIDE_TALK_GAP_S of the last (`side_talk`), but for a follow-up or
a question on the persona's topic.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

FOLLOW_UP_S = 600.0
"""How long after the persona's own message a question back still counts as a follow-up."""
SIDE_TALK_LINES = 4
"""A back-and-forth: this many lines in a row alternating between two other members..."""
SIDE_TALK_GAP_S = 120.0
"""... each within this many seconds of the one before it."""

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_YOU = frozenset({"you", "your", "you're", "youre", "yours", "yourself", "u", "ya", "ur"})
_ASKING = frozenset({
    "who", "what", "when", "where", "why", "how", "which", "can", "could", "would", "should",
    "is", "are", "do", "does", "did", "will", "any", "anyone", "anybody", "has", "have",
})  # fmt: skip
# A report that something does not work asks for help as a question does.
_TROUBLE = frozenset({
    "can't", "cant", "cannot", "won't", "doesn't", "isn't", "stopped", "stuck", "error", "broken",
    "fails", "failed", "failing", "missing", "disappeared", "crashes", "crashed",
})  # fmt: skip
_GREETING = frozenset({"hey", "hi", "hello", "ok", "okay", "so", "oi", "yo", "dear", "morning"})
_ACK = frozenset({
    "thanks", "thank", "thx", "ty", "ok", "okay", "cool", "nice", "great", "lol", "lmao", "haha",
    "got", "it", "perfect", "awesome", "cheers", "ah", "oh", "right", "yes", "yeah", "yep", "no",
    "nope", "sure", "k", "kk", "that", "works", "makes", "sense", "you", "a", "lot", "much",
    "so", "will", "do", "i", "see", "alright", "good", "to", "know", "appreciated", "brilliant",
    "amazing", "legend", "lovely", "all", "now", "both", "again", "🙏", "👍",
})  # fmt: skip
# Words too common to say what a role is about.
_STOP_WORDS = (
    "a about above after again against all also always am an and any are around as at be because "
    "been before being below between both but by can channel chat chats could did do does doing "
    "down during each every few for friend friends from further group had has have having he "
    "help helper helpful helps her here hers him his how i if in into is it its just keeper keeps "
    "kind knows like likes lot loves make makes many me member members more most much my no nor "
    "not now of off often on once one only or other our out over own people person question "
    "questions same server she should small so some such talks than that the their them then "
    "there these they this those through to too under until up very visitors was we were what "
    "when where which while who whom who's why will with would you your answers"
)
_STOP = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True)
class Line:
    """One message of the channel as the scorer sees it: who said it (an id,
    and the name shown), its text, its timestamp (seconds), whether it is the
    persona's own, and whether it replies to or names another member."""

    speaker: str
    name: str
    text: str
    ts: float
    own: bool = False
    to_other: bool = False


@dataclass(frozen=True)
class Persona:
    """What the scorer knows of the persona: the names it answers to and the
    (stemmed) words of its role."""

    names: frozenset[str]
    topics: frozenset[str]


@dataclass(frozen=True)
class Score:
    """A message's figure (0 to 1) and the signals that made it, by name."""

    value: float
    signals: tuple[str, ...]


def stem(word: str) -> str:
    """A crude stem, the same for the forms of a word: `recipes`, `recipe's` ->
    `recip`; `baking`, `baked`, `bake` -> `bak`; `shipping` -> `ship`."""
    word = word.removesuffix("'s")
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 4 and word.endswith(("sses", "ches", "shes", "xes")):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "ls":
        word = word[:-1]
    return word


def words(text: str) -> list[str]:
    """The words of `text`, lower-cased."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


@functools.lru_cache(maxsize=256)
def persona(name: str, agent_id: str, role: str) -> Persona:
    """The scorer's persona of a soul: its name, the name's first word and its
    id (each of 3 letters or more); the words of its role, stop words out."""
    names = {n for n in (name.lower(), *words(name)[:1], agent_id.lower()) if len(n) >= 3}
    topics = {stem(w) for w in words(role) if len(w) >= 4 and w not in _STOP}
    return Persona(frozenset(names), frozenset(topics - {stem(n) for n in names}))


def _named(text: str, names: frozenset[str]) -> tuple[bool, bool]:
    """Whether one of `names` is in `text` as a word (or words), and whether it
    calls the persona: it opens the text before a comma or a colon, or after a
    greeting, or closes it."""
    said = " ".join(words(text))
    for name in names:
        spoken = " ".join(words(name))
        found = re.search(rf"(?<!\S){re.escape(spoken)}(?!\S)", said)
        if found is None:
            continue
        before = said[: found.start()].split()
        opens = not before and bool(re.match(rf"\W*{re.escape(spoken)}\s*[,:]", text.lower()))
        greeted = len(before) == 1 and before[0] in _GREETING
        return True, opens or greeted or found.end() == len(said)
    return False, False


def asks(text: str) -> bool:
    """Whether `text` asks something: a question mark, it opens as a question
    does, or it says something does not work."""
    found = words(text)
    return "?" in text or (len(found) >= 3 and found[0] in _ASKING) or bool(_TROUBLE & set(found))


def _ack(found: list[str]) -> bool:
    """Thanks, agreement, laughter: nothing to answer."""
    return bool(found) and len(found) <= 6 and all(w in _ACK for w in found)


def _side_talk(lines: Sequence[Line]) -> bool:
    """The newest lines are two other members talking to each other, in turn,
    without a pause."""
    recent = lines[-SIDE_TALK_LINES:]
    if len(recent) < SIDE_TALK_LINES or any(line.own for line in recent):
        return False
    pairs = list(itertools.pairwise(recent))
    alternating = all(a.speaker != b.speaker and b.ts - a.ts <= SIDE_TALK_GAP_S for a, b in pairs)
    return alternating and len({line.speaker for line in recent}) == 2


def _names_other(text: str, lines: Sequence[Line]) -> bool:
    """The message opens by calling another member of the channel by name."""
    found = words(text)
    newest = lines[-1].speaker
    others = {
        w for line in lines[:-1] if not line.own and line.speaker != newest
        for w in words(line.name)[:1]
    }  # fmt: skip
    return bool(found) and found[0] in others


def _after_own(lines: Sequence[Line]) -> tuple[Line, Line | None, bool] | None:
    """The persona's last line in `lines`, the line it answered, and whether
    someone other than the newest line's author spoke since; None when the
    persona has not spoken."""
    newest = lines[-1]
    others = False
    for i in range(len(lines) - 2, -1, -1):
        line = lines[i]
        if line.own:
            answered = next((x for x in reversed(lines[:i]) if not x.own), None)
            return line, answered, others
        others = others or line.speaker != newest.speaker
    return None


def _follow_up(lines: Sequence[Line], found: list[str], question: bool) -> float:
    """What the newest line owes to the persona's last one (see the module docstring)."""
    after = _after_own(lines)
    newest = lines[-1]
    if after is None or newest.ts - after[0].ts > FOLLOW_UP_S or newest.to_other:
        return 0.0
    own, answered, others = after
    theirs = answered is not None and answered.speaker == newest.speaker
    if question and theirs:
        return 0.6
    if others:
        return 0.0
    you = any(w in _YOU for w in found)
    if question and you:
        return 0.6
    if you:
        return 0.4
    return 0.5 if theirs and "?" in own.text else 0.0


def _open_question(lines: Sequence[Line]) -> Line | None:
    """The newest question to the room before the newest line after which only
    its asker has spoken (nobody answered it), or None."""
    newest = lines[-1]
    for line in reversed(lines[:-1]):
        if line.own or line.speaker != newest.speaker:
            return None
        if asks(line.text) and not line.to_other:
            return line
    return None


def score(persona: Persona, lines: Sequence[Line], unanswered_after_s: float) -> Score:
    """The figure of the newest of `lines` (the channel's last lines, oldest
    first, the persona's own among them): see the module docstring."""
    newest = lines[-1]
    found = words(newest.text)
    question = asks(newest.text)
    named, calling = _named(newest.text, persona.names)
    if _ack([w for w in found if w not in persona.names]):
        return Score(0.0, ("ack",))
    value, signals = 0.0, []
    if named:
        value += 0.8 if calling or question or _YOU & set(found) else 0.4
        signals.append("name")
    follow = _follow_up(lines, found, question)
    if follow:
        value += follow
        signals.append("follow_up")
    hits = {stem(w) for w in found} & persona.topics
    if hits:
        value += (0.2 if len(hits) == 1 else 0.3) + (0.3 if question else 0.0)
        signals.append("topic")
    unanswered = _open_question(lines)
    if unanswered is not None and newest.ts - unanswered.ts >= unanswered_after_s:
        value += 0.5
        signals.append("unanswered")
    if not named and (newest.to_other or _names_other(newest.text, lines)):
        return Score(0.0, (*signals, "to_other"))
    if not (named or follow or (hits and question)) and _side_talk(lines):
        return Score(0.0, (*signals, "side_talk"))
    return Score(min(1.0, round(value, 3)), tuple(signals))
