"""The fixed lines an adapter sends by itself, without a turn."""

from __future__ import annotations

# A Discord slash command that produced no answer (an error, logged).
NO_ANSWER = "That command produced no answer; the bot's log says why."
