"""The fixed lines an adapter sends by itself, without a turn."""

from __future__ import annotations

# A Discord slash command that produced no answer (an error, logged).
NO_ANSWER = "That command produced no answer; the bot's log says why."


# Telegram's privacy mode (getMe's can_read_all_group_messages is false), for /soul status.
PRIVACY_MODE = (
    "Telegram privacy mode is on: in groups the bot sees only commands, mentions and replies "
    "to it. BotFather: /setprivacy -> Disable, then remove and re-add the bot to each group"
)

# A Telegram adapter taking its updates by webhook, for /soul status.
TELEGRAM_WEBHOOK = "Telegram: updates come by webhook, {url}"

# What a reply taken back (/retry, /undo) says where the platform keeps the message
# (Telegram lets a bot delete a message for 48 hours, and edit it at any age).
TAKEN_BACK = "(taken back)"
