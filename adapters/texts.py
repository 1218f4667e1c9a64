"""The fixed lines an adapter sends by itself, without a turn."""

from __future__ import annotations

# A Discord slash command that produced no answer (an error, logged).
NO_ANSWER = "That command produced no answer; the bot's log says why."


def images_left_out(limit: int, left_out: int) -> str:
    """A message carried more images than the bot looks at (Discord attachments)."""
    were = "was" if left_out == 1 else "were"
    if limit == 0:
        return f"I don't look at images here; {left_out} {were} left out"
    images = "image" if limit == 1 else "images"
    return f"I look at up to {limit} {images} a message; {left_out} {were} left out"


# What an adapter refuses of what came, one line each (`Inbound.refused`); sizes in MB.
PHOTO_TOO_LARGE = "the photo is too large for me to look at ({size} MB; I take up to {limit} MB)"
IMAGE_TOO_LARGE = (
    "the image {name} is too large for me to look at ({size} MB; I take up to {limit} MB)"
)

# Telegram's privacy mode (getMe's can_read_all_group_messages is false), for /soul status.
PRIVACY_MODE = (
    "Telegram privacy mode is on: in groups the bot sees only commands, mentions and replies "
    "to it. BotFather: /setprivacy -> Disable, then remove and re-add the bot to each group"
)
