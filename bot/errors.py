"""The error tree of soulbot.

    SoulbotError
    ├── ConfigError        the config file: which file, which key path, what was expected
    ├── SoulLoadError      a soul workspace: which file, which field, what was expected
    ├── InvalidWikiPageIdError  a memory wiki page id that breaks the id rule
    ├── BudgetExceeded     a model call the daily token budget refuses (it is not made)
    └── ModelError         a model call that failed after the SDK's retries

Every message says what failed and where, and never carries a secret value.
"""

from __future__ import annotations


class SoulbotError(Exception):
    """Root of every error soulbot raises on purpose."""


class ConfigError(SoulbotError):
    """The config file cannot be read or does not fit the schema."""


class SoulLoadError(SoulbotError):
    """A soul workspace cannot be loaded."""


class BudgetExceeded(SoulbotError):
    """A daily token budget refuses a model call; the call is not made.

    `kind` is "soul" or "user"; `limit` and `used` are today's tokens.
    """

    def __init__(self, kind: str, who: str, limit: int, used: int) -> None:
        super().__init__(f"daily {kind} token budget reached for {who}: {used} of {limit} used")
        self.kind = kind
        self.who = who
        self.limit = limit
        self.used = used


class ModelError(SoulbotError):
    """A model call failed (rate limit, overload, server error, timeout) after
    the SDK's own retries. `error_class` names the SDK error."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(f"{error_class}: {message}")
        self.error_class = error_class


class InvalidWikiPageIdError(SoulbotError):
    """A wiki page id that breaks the page-id rule or names a path outside
    `memory/`. `page_id` is the id as given."""

    def __init__(self, page_id: str, reason: str) -> None:
        super().__init__(f"invalid wiki page id {page_id!r}: {reason}")
        self.page_id = page_id
        self.reason = reason
