"""What a group chat said that was not addressed to the bot.

With `groups: mention` the bot answers only what is addressed to it; the rest
of a group's messages are kept here, per session key (a thread or forum topic
is its own), as "name: text" lines (one line each: a line break in the text is
shown as its escape, as in the heartbeat's transcripts, so no message opens a
line under another name), and the next turn of that session takes
them (`take`), oldest first, as "what was said since you last spoke", in the
per-turn part of the prompt (below the cache breakpoints: they change every
turn). Bounded: the newest `groups.context_messages` lines of at most
`groups.context_tokens` tokens a chat (a longer line is cut), and the
`CHATS` chats heard from last. Kept in memory only: a restart forgets them,
as a person coming back into a room would. DMs never come here (the router
keeps them out); the memory traces of these lines are the router's business
(`groups.remember_unaddressed`).
"""

from __future__ import annotations

from collections import deque

from cachetools import LRUCache

from bot.chat.history import count_tokens
from bot.chat.transcript import one_line

CHATS = 4096
LINE_CHARS = 600


class ChannelContext:
    """The unaddressed lines of group chats, by session key."""

    def __init__(self, messages: int, tokens: int, chats: int = CHATS) -> None:
        self._messages = messages
        self._tokens = tokens
        self._chats: LRUCache[str, deque[str]] = LRUCache(maxsize=chats)

    def add(self, session: str, name: str, text: str) -> None:
        """Keep one line of `session` (dropping the oldest past the bounds):
        `name: text`, each on one line (`one_line`), the text cut at LINE_CHARS."""
        if self._messages == 0 or self._tokens == 0:
            return
        text = one_line(text)
        if len(text) > LINE_CHARS:
            text = text[:LINE_CHARS] + "…"
        lines = self._chats.get(session)
        if lines is None:
            lines = self._chats[session] = deque(maxlen=self._messages)
        lines.append(f"{one_line(name)}: {text}")

    def take(self, session: str) -> list[str]:
        """The lines of `session` since the last take, oldest first, the newest
        that fit in `groups.context_tokens`; they are then forgotten."""
        lines = self._chats.pop(session, None)
        if not lines:
            return []
        kept: list[str] = []
        room = self._tokens
        for line in reversed(lines):
            room -= count_tokens(line)
            if room < 0:
                break
            kept.append(line)
        return kept[::-1]

    def drop(self, sessions: list[str]) -> None:
        """Forget the lines of `sessions` (`/forget`)."""
        for session in sessions:
            self._chats.pop(session, None)
