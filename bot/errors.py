"""The error tree of soulbot.

    SoulbotError
    ├── ConfigError        the config file: which file, which key path, what was expected
    └── SoulLoadError      a soul workspace: which file, which field, what was expected

Every message says what failed and where, and never carries a secret value.
"""

from __future__ import annotations


class SoulbotError(Exception):
    """Root of every error soulbot raises on purpose."""


class ConfigError(SoulbotError):
    """The config file cannot be read or does not fit the schema."""


class SoulLoadError(SoulbotError):
    """A soul workspace cannot be loaded."""
