"""The prompts and fixed replies soulbot sends, each readable on its own (STYLE §11)."""

from __future__ import annotations

# Replies the user sees when a turn cannot be answered.
APOLOGY = "I can't answer right now, please try again in a moment."
DAILY_LIMIT = "I've reached my daily limit for today. Let's talk again tomorrow."

# The per-turn line at the head of the newest user message (never cached).
NOW_LINE = "(Now: {now} UTC.)"

# The summary of compacted history, a system block after the soul's own.
SUMMARY_BLOCK = "## Earlier in this conversation\n{summary}"

COMPACT_SYSTEM = (
    "You keep the running summary of a chat between a persona and the people it talks "
    "with. Write a compact summary in the third person: who said what that matters later "
    "(names, facts about people, promises, open questions, the mood). Keep earlier summary "
    "points that still matter. No preamble, at most 250 words."
)
COMPACT_USER = (
    "Earlier summary:\n{summary}\n\nConversation to fold in:\n{transcript}\n\nThe new summary:"
)
