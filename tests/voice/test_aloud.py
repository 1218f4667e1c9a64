"""What is read aloud: never a code block or a link's address; long answers in
parts cut at sentence ends."""

from __future__ import annotations

from bot.voice.aloud import CODE_SAID, LINK_SAID, aloud, parts


def test_code_blocks_and_addresses_are_never_read() -> None:
    text = (
        "# Fix\n\nRun **this**, from [the guide](https://example.com/guide):\n\n"
        "```sh\nrm -rf /tmp/cache\n```\n\nor see https://example.com/x?y=1.\n\n"
        "~~~\nunclosed fence to the end\n"
    )
    said = aloud(text)
    assert "rm -rf" not in said and "unclosed" not in said and "example.com" not in said
    assert (
        said
        == f"Fix\n\nRun this, from the guide:\n\n{CODE_SAID}\n\nor see {LINK_SAID}.\n\n{CODE_SAID}"
    )


def test_markup_goes_and_its_words_stay() -> None:
    text = (
        "> a _quoted_ line\n- one `ls`\n* ***two***\n\n| a | b |\n|---|---|\n| 1 | 2 |\n<b>bold</b>"
    )
    assert aloud(text) == "a quoted line\none ls\ntwo\n\na, b\n1, 2\nbold"
    assert aloud("snake_case_name is 2*3*4") == "snake_case_name is 2*3*4"
    assert aloud("```\nonly code\n```\nhttps://example.com") == ""
    assert aloud("   \n") == ""


def test_parts_cut_at_sentence_ends_then_words() -> None:
    script = "First one. Second, longer sentence! Third? " + "word " * 30
    cut = parts(script, 40)
    assert cut[0] == "First one. Second, longer sentence!"
    assert all(len(p) <= 40 for p in cut)
    assert " ".join(cut).split() == script.split()
    assert parts("x" * 95, 40) == ["x" * 40, "x" * 40, "x" * 15]
    assert parts("Short.", 40) == ["Short."]
