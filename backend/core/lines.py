"""Lines as an editor counts them: the unit of `<copy lines="i-j"/>`.

A line break is `\\n`, `\\r\\n` or a lone `\\r`, and nothing else. Python's `str.splitlines` also
breaks on `\\x0b`, `\\x0c`, `\\x1c`-`\\x1e`, `\\x85`, `\\u2028` and `\\u2029`; editors (and people
reading line numbers) do not, so a model shown numbered lines would see numbers that disagree
with what a person sees, and copies would land on the wrong lines. Here those characters are
ordinary characters inside a line.
"""

from __future__ import annotations

import re

# One line: any run of non-break characters, then its break (CRLF before lone CR or LF, so
# "\r\n" stays one break); or, only at the very end, a last line with no break.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_BREAK_AT_END = re.compile(r"(?:\r\n|\r|\n)\Z")


def split_lines(text: str) -> list[str]:
    """Split `text` into lines that keep their own endings.

    `"".join(split_lines(t)) == t` for every string; `split_lines("") == []`; the last line may
    have no ending. Rejects nothing.
    """
    return _LINE.findall(text)


def line_count(text: str) -> int:
    """How many lines `text` has (what the last `<copy lines>` number may be). Rejects nothing."""
    return len(split_lines(text))


def strip_line_ending(line: str) -> str:
    """`line` without its trailing LF, CRLF or lone CR (at most one). Rejects nothing."""
    return _BREAK_AT_END.sub("", line, count=1)


def number_lines(text: str) -> str:
    """The input as shown to a model: one `"{i:>w}| {line}"` row per line, 1-based.

    `w` is the width of the largest line number, so the bars line up. Every row ends with
    `"\\n"` whatever the original ending was: the model only needs the numbers and the content,
    because copies reproduce the original endings byte for byte. `number_lines("") == ""`.
    Rejects nothing.
    """
    lines = split_lines(text)
    width = len(str(len(lines)))
    return "".join(
        f"{number:>{width}}| {strip_line_ending(line)}\n"
        for number, line in enumerate(lines, start=1)
    )
