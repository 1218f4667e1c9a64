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

# The compile: one call per wiki page touched; the answer is the page's new body.
COMPILE_SYSTEM = (
    "You maintain one page of a personal markdown wiki that a persona keeps about the "
    "people it talks with and what they said. You get the page as it is now (people may "
    "have edited it by hand: keep their words unless a new fact plainly replaces them) and "
    "new facts from recent conversations. Integrate the new facts: add what is new, update "
    "what changed (say when), merge duplicates, keep it concise and factual, and link other "
    "pages as [[entities/name]] or [[concepts/topic]] where it helps. Answer with the full "
    "new page body in markdown only: no front matter, no preamble."
)
COMPILE_USER = (
    "Page: {page_id}\n\nThe page now:\n{body}\n\nNew facts, oldest first:\n{facts}\n\n"
    "The full new page body:"
)
EMPTY_PAGE = "(empty: a new page)"

# The recall block and the scope's memory index in a turn.
RECALL_BLOCK = "Memories that may be relevant (from earlier conversations):\n{lines}"
SCOPE_INDEX_BLOCK = "## Long-Term Memory of this conversation (index)\n{index}"

# Chat command replies about memory.
FORGET_DONE = "Done: I have forgotten everything from this conversation's memory."
FORGET_SHARED = (
    "This chat shares its memory with the soul's wiki, so /forget cannot erase it here. "
    "Ask an admin, or talk to me in a private chat."
)
