"""Markdown -> Telegram HTML (adapters/telegram_format.py)."""

from __future__ import annotations

import pytest

from adapters.telegram_format import to_html
from tests.fakes.telegram_fake import parse_html


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("plain & <simple>", "plain &amp; &lt;simple&gt;"),
        ("**bold** and __also__", "<b>bold</b> and <b>also</b>"),
        ("*it* and _it_ but snake_case_name", "<i>it</i> and <i>it</i> but snake_case_name"),
        ("~~gone~~", "<s>gone</s>"),
        ("use `a<b>` here", "use <code>a&lt;b&gt;</code> here"),
        ("`**not bold**`", "<code>**not bold**</code>"),
        ("[site](https://e.com/?a=1&b=2)", '<a href="https://e.com/?a=1&amp;b=2">site</a>'),
        ("## Title", "<b>Title</b>"),
        ("2 * 3 * 4", "2 * 3 * 4"),
        (
            "```python\nif a < b:\n    print('x')\n```",
            "<pre><code class=\"language-python\">if a &lt; b:\n    print('x')</code></pre>",
        ),
        ("```\nno language\n```", "<pre>no language</pre>"),
        ("```\nunclosed", "<pre>unclosed</pre>"),
        (r"\*not it\* nor \[x\](https://e.com)", "*not it* nor [x](https://e.com)"),
        (r"`a\*b` and \`c\`", r"<code>a\*b</code> and `c`"),
        (r"\## not a heading", "## not a heading"),
        (r"C:\Users\x \\ \<b\> \q", r"C:\Users\x \ &lt;b&gt; \q"),
        (r"[a \] b](https://e.com) **x\*y**", '<a href="https://e.com">a ] b</a> <b>x*y</b>'),
    ],
)
def test_markdown_becomes_telegram_html(markdown: str, html: str) -> None:
    assert to_html(markdown) == html


@pytest.mark.parametrize(
    "markdown",
    ["**a *b** c*", "a_b_c **x", "<b>raw tags</b>", "[x](javascript:alert(1))", "**`x`**"],
)
def test_awkward_markdown_still_gives_html_telegram_accepts(markdown: str) -> None:
    parse_html(to_html(markdown))  # raises ValueError on what Telegram would refuse
