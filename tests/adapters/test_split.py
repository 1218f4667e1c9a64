"""Cutting long replies into chunks a platform accepts."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.split import MIN_LIMIT, split_message, utf16_len

FENCE_LINE = re.compile(r"\s*(`{3,}|~{3,})(.*)")


def fence_lines(text: str) -> list[str]:
    """The lines of `text` that read as fence lines, trimmed."""
    return [line.strip() for line in text.split("\n") if FENCE_LINE.match(line)]


def balanced(chunk: str) -> bool:
    """Whether every fence `chunk` opens, it also closes (the module's reading of fences)."""
    run: str | None = None
    for line in chunk.split("\n"):
        match = FENCE_LINE.match(line)
        if not match:
            continue
        marker, info = match.groups()
        if run is None and not (marker[0] == "`" and "`" in info):
            run = marker
        elif run is not None and marker[0] == run[0] and len(marker) >= len(run):
            run = None
    return run is None


def visible(text: str) -> str:
    """The non-whitespace characters of `text`, fence lines left out."""
    lines = (line for line in text.split("\n") if not FENCE_LINE.match(line))
    return "".join("".join(line.split()) for line in lines)


def is_subsequence(short: list[str], long: list[str]) -> bool:
    rest = iter(long)
    return all(item in rest for item in short)


def assert_well_formed(
    text: str, chunks: list[str], limit: int, measure: Callable[[str], int]
) -> None:
    for chunk in chunks:
        assert measure(chunk) <= limit, chunk
        assert chunk.strip() == chunk != ""
        assert balanced(chunk), chunk
    joined = "\n".join(chunks)
    assert visible(joined) == visible(text)
    assert is_subsequence(fence_lines(text), fence_lines(joined))


def test_utf16_len_counts_astral_characters_twice() -> None:
    assert utf16_len("") == 0
    assert utf16_len("héllo") == 5
    assert utf16_len("a😀") == 3
    assert utf16_len("\ud83d") == 1  # a lone surrogate does not raise


@pytest.mark.parametrize("text", ["", "   ", "\n\n \t\n"])
def test_blank_text_is_no_chunks(text: str) -> None:
    assert split_message(text, 2000) == []


def test_text_that_fits_is_one_tidied_chunk() -> None:
    text = "\n\n  Hello there.  \n\nSecond paragraph.\t\n\n"
    assert split_message(text, 2000) == ["Hello there.\n\nSecond paragraph."]


@pytest.mark.parametrize("limit", [0, 1, MIN_LIMIT - 1])
def test_a_limit_too_small_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_LIMIT}"):
        split_message("hello", limit)


def test_a_paragraph_break_wins_over_a_later_line_break() -> None:
    first = "The first paragraph, line one.\nAnd its second line."
    second = "A second paragraph begins.\nIt goes on long enough to overflow the limit."
    chunks = split_message(f"{first}\n\n{second}", 80)
    assert chunks == [first, second]


def test_a_line_break_wins_over_a_later_word_break() -> None:
    lines = ["alpha beta gamma delta", "epsilon zeta eta theta", "iota kappa lambda mu nu xi"]
    chunks = split_message("\n".join(lines), 60)
    assert chunks == ["\n".join(lines[:2]), lines[2]]


def test_a_long_line_is_cut_at_the_last_word_that_fits() -> None:
    words = [f"word{i:03}" for i in range(200)]  # 7 characters each
    chunks = split_message(" ".join(words), 100)
    assert " ".join(chunks) == " ".join(words)
    assert all(len(chunk) == 7 * 12 + 11 for chunk in chunks[:-1])  # 12 words, 95 characters


def test_a_huge_word_is_cut_hard_and_fills_every_chunk() -> None:
    chunks = split_message("x" * 10_000, 2000)
    assert chunks == ["x" * 2000] * 5


def test_a_hard_cut_keeps_combining_marks_with_their_letter() -> None:
    text = "e\u0301" * 1000
    chunks = split_message(text, 101)
    assert "".join(chunks) == text
    assert all(len(chunk) <= 101 and not chunk.startswith("\u0301") for chunk in chunks)


def test_a_cut_inside_code_closes_and_reopens_the_fence_with_its_language() -> None:
    code = "\n".join(f"print({i})" for i in range(300))
    text = f"Here you go:\n\n```python\n{code}\n```\n\nThat prints a lot."
    chunks = split_message(text, 500)
    assert len(chunks) > 2
    assert chunks[0].startswith("Here you go:\n\n```python\n")
    assert chunks[0].endswith("\n```")
    for chunk in chunks[1:-1]:
        assert chunk.startswith("```python\n")
        assert chunk.endswith("\n```")
    assert chunks[-1].startswith("```python\n")
    assert chunks[-1].endswith("```\n\nThat prints a lot.")
    assert_well_formed(text, chunks, 500, len)


def test_code_lines_keep_their_indentation_across_cuts() -> None:
    code = [
        line
        for i in range(60)
        for line in (f"def f{i}(x):", f"    if x > {i}:", f"        return x * {i}", "    return 0")
    ]
    text = "```python\n" + "\n".join(code) + "\n```"
    chunks = split_message(text, 300)
    assert len(chunks) > 5
    kept = [line for chunk in chunks for line in chunk.split("\n") if not line.startswith("```")]
    assert kept == code


def test_a_cut_goes_before_a_fence_rather_than_inside_it() -> None:
    prose = " ".join(["Some words of explanation."] * 50)  # 1,349 characters
    code = "\n".join(f"value_{i} = {i} * {i}" for i in range(60))  # about 1,200
    block = f"```python\n{code}\n```"
    chunks = split_message(f"{prose}\n{block}\n\nDone.", 2000)
    assert chunks == [prose, block + "\n\nDone."]


def test_a_cut_goes_after_a_fence_closes_rather_than_inside_it() -> None:
    code = "\n".join(f"value_{i} = {i} * {i}" for i in range(60))
    block = f"```python\n{code}\n```"
    prose = "\n".join(["A line of prose that follows the code block."] * 30)
    chunks = split_message(f"{block}\n{prose}", 2000)
    assert chunks[0] == block
    assert_well_formed(f"{block}\n{prose}", chunks, 2000, len)


def test_a_fence_left_open_at_the_end_is_closed() -> None:
    assert split_message("Look:\n~~~\ncode", 2000) == ["Look:\n~~~\ncode\n~~~"]


def test_inline_triple_backticks_are_not_a_fence() -> None:
    text = "```x``` is inline\n" + "word " * 30
    chunks = split_message(text, 60)
    assert all(not chunk.endswith("\n```") for chunk in chunks)
    assert visible("".join(chunks)) == visible(text)


def test_utf16_measure_never_exceeds_the_limit_with_emoji_at_the_boundary() -> None:
    text = "a" + "😀" * 3000
    chunks = split_message(text, 4096, utf16_len)
    assert [utf16_len(chunk) for chunk in chunks] == [4095, 1906]
    assert "".join(chunks) == text


def test_utf16_measure_counts_the_added_fence_lines() -> None:
    text = "```\n" + "😀" * 5000 + "\n```"
    chunks = split_message(text, 4096, utf16_len)
    assert all(utf16_len(chunk) <= 4096 for chunk in chunks)
    assert_well_formed(text, chunks, 4096, utf16_len)


def test_a_long_answer_with_code_splits_into_balanced_chunks() -> None:
    sections = []
    for i in range(12):
        prose = f"Step {i}: " + "we explain what the next snippet does and why. " * 6
        code = "\n".join(f"    result_{i}_{j} = compute({i}, {j})" for j in range(8 + i))
        sections.append(f"{prose.strip()}\n\n```python\ndef step_{i}():\n{code}\n```")
    text = "\n\n".join(sections)
    assert 9000 <= len(text) <= 10_500
    chunks = split_message(text, 2000)
    assert len(chunks) >= 5
    assert_well_formed(text, chunks, 2000, len)


_WORD = st.text(st.sampled_from("abcxyzé字😀\u0301"), min_size=1, max_size=10)
_TOKEN = st.one_of(
    _WORD.map(lambda word: word + " "),
    _WORD,
    st.text(st.sampled_from("abé😀"), min_size=40, max_size=400),  # a huge word
    st.sampled_from(["\n", "\n\n", "\n    ", "\n\t", "a```b ", "w ```q "]),
    st.sampled_from(["```", "```py", "~~~", "````"]).map(lambda fence: f"\n{fence}\n"),
)


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.lists(_TOKEN, max_size=60),
    limit=st.integers(MIN_LIMIT, 300),
    measure=st.sampled_from([len, utf16_len]),
)
def test_every_chunk_fits_is_balanced_and_content_survives(
    tokens: list[str], limit: int, measure: Callable[[str], int]
) -> None:
    text = "".join(tokens)
    chunks = split_message(text, limit, measure)
    assert_well_formed(text, chunks, limit, measure)
    assert all(len(chunk) <= limit for chunk in chunks)
    assert (chunks == []) == (text.strip() == "")
