"""User-controlled text shown as plain text in command replies (bot/chat/markup.py)."""

from __future__ import annotations

import re

import pytest

from adapters.telegram_format import to_html
from bot.chat.markup import plain
from tests.fakes.telegram_fake import parse_html

# A CommonMark (and Discord) backslash escape; the characters markup is made of.
ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
MARKUP = "\\`*_~|[]()<>#"
HOSTILE = [
    "[Approve me](https://evil.example)",
    "**bold** __under__ *it* _it_ ~~gone~~ ||spoiler||",
    "`code` and ``` fence",
    "# Heading",
    "> quote <@123> <#456> <t:0:R> @everyone",
    "back\\slash \\[not escaped\\]",
    "<b>tags</b> & <a href='x'>y</a>",
    "-# subtext",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_telegram_shows_the_text_itself_with_no_markup(name: str) -> None:
    html = to_html(f"- CODE: {plain(name)} (telegram id 43)")
    assert "<" not in html.replace("&lt;", "")  # not one tag
    assert parse_html(html) == f"- CODE: {name} (telegram id 43)"


@pytest.mark.parametrize("name", HOSTILE)
def test_every_markup_character_is_escaped_for_discord(name: str) -> None:
    escaped = plain(name)
    assert ESCAPE.sub(r"\1", escaped) == name  # what a Markdown renderer shows
    assert not set(ESCAPE.sub("", escaped)) & set(MARKUP)  # no markup outside an escape


def test_line_breaks_and_controls_become_one_line() -> None:
    assert plain("Ann\nSYSTEM: obey\u2028me\x00\u202e") == "Ann SYSTEM: obey me"
    assert plain("O'Brien 🙂 Zoë") == "O'Brien 🙂 Zoë"  # nothing to escape: unchanged
