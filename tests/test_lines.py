"""Lines as an editor counts them: LF, CRLF, lone CR, and nothing else."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.core.lines import line_count, number_lines, split_lines, strip_line_ending

text__lines = [
    ("", []),
    ("a", ["a"]),
    ("\n", ["\n"]),
    ("a\nb", ["a\n", "b"]),
    ("a\nb\n", ["a\n", "b\n"]),
    ("a\r\nb\r\n", ["a\r\n", "b\r\n"]),
    ("a\rb\r", ["a\r", "b\r"]),
    ("\r\n\r\n", ["\r\n", "\r\n"]),
    ("\n\r", ["\n", "\r"]),  # LF then lone CR: two breaks, not one CRLF
    ("\r\r\n", ["\r", "\r\n"]),
    ("a\n\nb", ["a\n", "\n", "b"]),
    ("mixed\nends\r\nhere\rlast", ["mixed\n", "ends\r\n", "here\r", "last"]),
    # str.splitlines breaks on all of these; editors do not, so neither do we.
    ("a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i", ["a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i"]),
    ("x\u2028\n", ["x\u2028\n"]),
]


@pytest.mark.parametrize(("text", "lines"), text__lines)
def test_split_lines(text, lines):
    assert split_lines(text) == lines
    assert line_count(text) == len(lines)


text__numbered = [
    ("", ""),
    ("a", "1| a\n"),
    ("a\r\nb\rc\n", "1| a\n2| b\n3| c\n"),
    ("\n" * 10, "".join(f"{i:>2}| \n" for i in range(1, 11))),
    ("x\u2028y\n", "1| x\u2028y\n"),
]


@pytest.mark.parametrize(("text", "numbered"), text__numbered)
def test_number_lines(text, numbered):
    assert number_lines(text) == numbered


line__stripped = [
    ("a\n", "a"),
    ("a\r\n", "a"),
    ("a\r", "a"),
    ("a", "a"),
    ("\n", ""),
    ("a\x85", "a\x85"),
]


@pytest.mark.parametrize(("line", "stripped"), line__stripped)
def test_strip_line_ending(line, stripped):
    assert strip_line_ending(line) == stripped


line_texts = st.lists(
    st.sampled_from(["\n", "\r\n", "\r", "a", " ", "\x0b", "\x85", "\u2028", "é"]) | st.text(max_size=3),
    max_size=20,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(line_texts)
def test_split_lines_partitions_the_text_at_editor_breaks(text):
    lines = split_lines(text)
    assert "".join(lines) == text
    for index, line in enumerate(lines):
        body = strip_line_ending(line)
        assert line, "no empty lines"
        assert "\r" not in body and "\n" not in body
        if index < len(lines) - 1:
            assert body != line, "every line but the last ends with a break"
        if line.endswith("\r") and index < len(lines) - 1:
            assert not lines[index + 1].startswith("\n"), "CRLF is one break"


@settings(max_examples=200, deadline=None)
@given(line_texts)
def test_number_lines_has_one_row_per_line(text):
    rows = number_lines(text).split("\n")[:-1] if text else []
    assert len(rows) == line_count(text)
    for number, (row, line) in enumerate(zip(rows, split_lines(text)), start=1):
        prefix, _, body = row.partition("| ")
        assert int(prefix) == number
        assert body == strip_line_ending(line)
