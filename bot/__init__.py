"""soulbot: a persona ("soul") with a life on Discord and Telegram."""

__version__ = "0.1.0"
