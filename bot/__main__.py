"""`python -m bot` is the `soulbot` command."""

from bot.cli import main

main()
