"""The demo model of the no-key trial (`make fake`): the fake model answering every
call soulbot makes briefly and validly, as a model named "demo" that costs nothing.

* a chat turn: ``(demo) I heard: <the newest user message>``, on one line, cut
  to 200 characters;
* a compile (`file_notes`, a page merge): as the librarian (tests/fakes/librarian.py);
* the heartbeat's forced `save_soul` call: a reflection built from the conversation
  it was given, one that `bot.soul.heartbeat.validate` accepts: it quotes the longest
  thing "Them" said, keeps that as one fact (importance 0.6), and proposes no rule;
* the heartbeat's fold: one overview line of the folded entries;
* a compaction: one line saying how many messages were folded in, and the last one;
* `soulbot check --online`'s forced `report_ready` call: made, with `ready` true.

`DemoAnthropic` is the fake with this responder, every answer reporting the model
`DEMO_MODEL` ("demo", priced at 0 in bot/model/usage.py's `DEFAULT_PRICES`), so
`soulbot usage` and `/soul status` show $0 for the trial. Run it as
`python -m tests.fakes.anthropic_fake --demo`.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from bot import prompts
from bot.errors import Rejected
from bot.soul import heartbeat
from bot.soul.regions import HeartbeatParams
from tests.fakes.anthropic_fake import JSON, FakeAnthropic, Reply, _Block
from tests.fakes.librarian import librarian

DEMO_MODEL = "demo"
ECHO_CHARS = 200
_THEM = "Them: "
_ENTRY = re.compile(r"^- \[[^\]]*\] ")
# What a heartbeat line may not hold (see bot/soul/heartbeat.py `_line`).
_REFUSED = frozenset({"Cc", "Cf", "Zl", "Zp"})
_FORGERY = re.compile(r"<!--|-->|SOUL_(?:META|CORE|MEMORY|AUTOBIOGRAPHY)")


def _between(text: str, template: str, slot: str) -> str:
    """The part of `text` that filled `{slot}`, the last field of `template` before
    its fixed tail, found after the last copy of the fixed text before the slot (a
    transcript is one line per message, so it cannot hold that text's line breaks)."""
    before, _, after = template.partition("{" + slot + "}")
    head = re.split(r"\{[a-z_]+\}", before)[-1]
    tail = re.split(r"\{[a-z_]+\}", after)[0]
    _, found, rest = text.rpartition(head)
    if not found:
        return ""
    return rest[: len(rest) - len(tail)] if tail and rest.endswith(tail) else rest


def _text_blocks(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [
        b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
    ]


def _user_text(body: JSON) -> str:
    messages = body.get("messages") or [{}]
    return "".join(_text_blocks(messages[-1].get("content")))


def _system_text(body: JSON) -> str:
    return "".join(_text_blocks(body.get("system") or ""))


def clip(text: str, limit: int) -> str:
    """`text` as one safe line of at most `limit` characters: whitespace runs as one
    space, control and format characters dropped, region markers and HTML comment
    marks taken out, cut with "..." when longer."""
    text = "".join(c for c in text if unicodedata.category(c) not in _REFUSED or c.isspace())
    text = " ".join(_FORGERY.sub(" ", " ".join(text.split())).split()).lstrip("# ")
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def echo(body: JSON) -> Reply:
    """A chat turn's answer: the newest text of the user's, on one line, cut."""
    said = [
        text
        for message in body.get("messages") or []
        if isinstance(message, dict) and message.get("role") == "user"
        for text in _text_blocks(message.get("content"))
        if text.strip()
    ]
    heard = " ".join((said[-1] if said else "").split())
    if len(heard) > ECHO_CHARS:
        heard = heard[:ECHO_CHARS] + "..."
    return Reply.of_text(f"(demo) I heard: {heard or '(nothing)'}")


def reflection(conversation: str) -> JSON:
    """A `save_soul` input for the heartbeat transcript `conversation` that
    passes `heartbeat.validate` with the default parameters and empty phrases."""
    lines = [line for line in conversation.split("\n") if line.strip()]
    said = [line[len(_THEM) :] for line in lines if line.startswith(_THEM)]
    longest = max(said, key=lambda s: len(s.strip()), default="")
    quote, fact = clip(longest, 100), clip(longest, 150)
    count = f"{len(lines)} message{'s' if len(lines) != 1 else ''}"
    if quote:
        data: JSON = {
            "reflection": f'In a demo conversation of {count} they told me "{quote}", '
            "and I want to remember it.",
            "memory_updates": [{"fact": f'Someone told me: "{fact}"', "importance": 0.6}],
            "rule_updates": [],
        }
        try:
            heartbeat.validate(data, HeartbeatParams())
            return data
        except Rejected:
            pass  # an empty phrase quoted, say: the plain sentence below
    return {
        "reflection": f"In a demo conversation of {count} I mostly listened.",
        "memory_updates": [],
        "rule_updates": [],
    }


def fold(entries: str) -> Reply:
    """The fold's overview: the folded entries, oldest first, on one line."""
    texts = [_ENTRY.sub("", line) for line in entries.split("\n") if _ENTRY.match(line)]
    return Reply.of_text(clip("(demo) Earlier: " + "; ".join(reversed(texts)), 300))


def summary(conversation: str) -> Reply:
    """A compaction's summary: how many messages were folded in, and the last."""
    lines = [line for line in conversation.split("\n") if line.strip()]
    last = clip(lines[-1], 200) if lines else "(none)"
    return Reply.of_text(f"(demo) {len(lines)} earlier messages; the last was {last}")


def demo(body: JSON) -> Reply:
    """The demo model's answer to any request soulbot makes (see the module docstring)."""
    forced = (body.get("tool_choice") or {}).get("name")
    if forced == prompts.PROBE_TOOL_NAME:  # `soulbot check --online`: do tools work here?
        return Reply.of_tool_use(forced, {"ready": True})
    if forced == "save_soul":
        conversation = _between(_user_text(body), prompts.HEARTBEAT_USER, "transcript")
        return Reply.of_tool_use("save_soul", reflection(conversation))
    compiled = librarian(body)
    if compiled is not None:
        return compiled
    system = _system_text(body)
    if system == prompts.FOLD_SYSTEM:
        return fold(_between(_user_text(body), prompts.FOLD_USER, "entries"))
    if system == prompts.COMPACT_SYSTEM:
        return summary(_between(_user_text(body), prompts.COMPACT_USER, "transcript"))
    return echo(body)


class DemoAnthropic(FakeAnthropic):
    """The fake with the `demo` responder; every message it answers names the model
    `DEMO_MODEL` (the SDK's `message.model`, which the usage ledger prices)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.responder = demo

    def _message(self, body: JSON, blocks: list[_Block], reply: Reply) -> JSON:
        return {**super()._message(body, blocks, reply), "model": DEMO_MODEL}
