"""The per-person rate limit (`limits.messages_per_minute`); an image counts
as a message (a message with three counts three).

A person past the limit is still heard: their message is stored at once, but
starts no turn of its own; it is answered with the next turn of its chat (one
that is running, or the one that starts when the person's window has room
again). They are told once per window that the bot is catching up.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 60.0


class RateLimit:
    """Messages per person per `WINDOW_S`, counted in memory."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = per_minute
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}
        self._told: dict[str, float] = {}

    def admit(self, person: str, count: int = 1) -> tuple[float, bool]:
        """Count `count` messages of `person`: (seconds until their window has
        room, 0 when it has now; whether to tell them, once per window)."""
        now = self._clock()
        window = self._seen.setdefault(person, deque())
        while window and now - window[0] >= WINDOW_S:
            window.popleft()
        window.extend([now] * count)
        if len(window) <= self._limit:
            return 0.0, False
        wait = WINDOW_S - (now - window[-self._limit - 1])
        tell = now - self._told.get(person, -WINDOW_S) >= WINDOW_S
        if tell:
            self._told[person] = now
        return wait, tell

    def __len__(self) -> int:
        """How many people have a window now."""
        return len(self._seen)

    def limited(self) -> list[tuple[str, float]]:
        """The people held back now, with the seconds until their window has room."""
        now = self._clock()
        held = []
        for person, window in self._seen.items():
            inside = [t for t in window if now - t < WINDOW_S]
            if len(inside) > self._limit:
                held.append((person, WINDOW_S - (now - inside[-self._limit - 1])))
        return sorted(held)

    def sweep(self) -> None:
        """Drop the windows of people quiet for a whole window."""
        now = self._clock()
        for person in [p for p, w in self._seen.items() if not w or now - w[-1] >= WINDOW_S]:
            del self._seen[person]
        self._told = {p: t for p, t in self._told.items() if now - t < WINDOW_S}
