"""Bots among bots (`groups.respond_to_bots`, or a binding's): when another
bot's message in a group is answered (docs/groups.md).

Off (the default), a bot's message is dropped as if it never came: no answer,
no model call, no context. On, it is gated as a person's would be (a mention,
a reply to the persona, or the rule `always`; never ambient mode's unprompted
replies, never a command), and then by its channel's chain: the persona's
replies to bots since the last person's message there. With `n` replies in the
chain already, the next one is allowed with the chance `groups.bots.decay**n`
(the first is certain; a seeded or injected `chance` makes it deterministic),
and never past `groups.bots.replies_per_minute` replies to bots in the
channel's rolling minute, in the channel's own time (its messages'
timestamps). A person's message resets the chain, not the minute's count.
Every bot's message is one `bots.decided` line: its session, soul, the chain's
length, the decision (`answer`, `silent` or `ignored`, the last at debug
level) and the reason; never a message's text. The persona's own messages
never get here: the adapters drop them.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from cachetools import LRUCache

from bot.config.schema import BotsConfig

log = structlog.get_logger(__name__)

MINUTE_S = 60.0
CHANNELS = 4096
"""Channels whose chain is kept (the ones heard from last)."""


@dataclass
class _Chain:
    length: int = 0
    """The persona's replies to bots since the last person's message."""
    replies: deque[float] = field(default_factory=deque)
    """The timestamps of its replies to bots in the last minute, oldest first."""


class Bots:
    """The bot-to-bot chains of every group channel."""

    def __init__(self, config: BotsConfig, chance: Callable[[], float] = random.random) -> None:
        self._config = config
        self._chance = chance
        self._chains: LRUCache[str, _Chain] = LRUCache(maxsize=CHANNELS)

    def human(self, session: str) -> None:
        """A person spoke in `session`: its chain starts again."""
        chain = self._chains.get(session)
        if chain is not None:
            chain.length = 0

    def ignored(self, session: str, soul: str, reason: str) -> bool:
        """Log a bot's message dropped unread (`reason`: why); False."""
        return _decided(session, soul, self._length(session), "ignored", reason)

    def answers(self, session: str, soul: str, ts: float, addressed: bool) -> bool:
        """Whether a bot's message in `session` at `ts` (its timestamp) is
        answered: it must be `addressed` (the rule's own gate), under the
        minute's cap, and past the chain's chance. An answer counts in the
        chain and the cap. Logged (module docstring)."""
        chain = self._chains.get(session)
        if chain is None:
            chain = self._chains[session] = _Chain()
        if not addressed:
            return _decided(session, soul, chain.length, "silent", "not addressed")
        replies = chain.replies
        while replies and ts - replies[0] >= MINUTE_S:
            replies.popleft()
        cap = self._config.replies_per_minute
        if len(replies) >= cap:
            return _decided(session, soul, chain.length, "silent",
                            f"{len(replies)} replies to bots this minute (cap {cap})")  # fmt: skip
        odds = self._config.decay**chain.length
        if self._chance() >= odds:
            return _decided(session, soul, chain.length, "silent", f"chance {odds:.3g} missed")
        chain.length += 1
        replies.append(ts)
        return _decided(session, soul, chain.length, "answer", f"chance {odds:.3g}")

    def _length(self, session: str) -> int:
        chain = self._chains.get(session)
        return chain.length if chain is not None else 0


def _decided(session: str, soul: str, length: int, decision: str, reason: str) -> bool:
    line = {"session": session, "soul": soul, "chain": length, "decision": decision,
            "reason": reason}  # fmt: skip
    if decision == "ignored":  # off, the default, where other bots post all day: debug
        log.debug("bots.decided", **line)
    else:
        log.info("bots.decided", **line)
    return decision == "answer"
