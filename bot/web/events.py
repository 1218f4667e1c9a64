"""What the Health page says of the model: its last errors and the fallback's use
since the daemon started, seen in the log events as they pass (bot/app/logs.py
`observing`, as the metrics are counted). Only an event's name, time, model,
source and error class are kept, never its free text (the observers run before
the redactor)."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

KEPT = 10
_ERRORS = frozenset({"turn.failed", "llm.fallback", "llm.fallback_failed", "llm.tools_refused"})
_FALLBACK = frozenset({"llm.fallback", "llm.fallback_failed"})


@dataclass(frozen=True)
class ModelEvent:
    ts: float
    event: str
    model: str
    source: str
    error_class: str


class ModelEvents:
    """A structlog processor keeping the last `KEPT` model errors and counting the
    fallback's calls (`fallbacks`: `llm.fallback` and `llm.fallback_failed`)."""

    def __init__(self) -> None:
        self.last: deque[ModelEvent] = deque(maxlen=KEPT)
        self.fallbacks: Counter[str] = Counter()

    def __call__(
        self, logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        name = event.get("event")
        if name in _ERRORS:
            self.last.appendleft(ModelEvent(
                time.time(), str(name), str(event.get("model", "")), str(event.get("source", "")),
                str(event.get("error_class", "")),
            ))  # fmt: skip
        if name in _FALLBACK:
            self.fallbacks[str(name)] += 1
        return event
