"""Line operations: how every edit task states its change to a code window, shared by the generators.

An edit is a set of line operations on the window (`LineOps`: 0-based line index -> the lines that
replace it; `[]` deletes it, `[new, old]` inserts before it), so several edits combine when they touch
different lines, and the target is exact by construction. Standard library only.
"""

from __future__ import annotations

import random
from typing import Callable

from backend.training.scan import Token

LineOps = dict[int, list[str]]
# what a generator of one edit returns: (ops, instruction), or None where the window has no place for it
Single = tuple[LineOps, str]
EditMaker = Callable[[list[str], str, random.Random], "Single | None"]


def apply_ops(lines: list[str], ops: LineOps) -> str:
    return "".join(part for index, line in enumerate(lines) for part in ops.get(index, [line]))


def comment_marker(language: str) -> str:
    """The line-comment marker, for the comments and snippet markers the generators write."""
    return "#" if language == "python" else "//"


def replace_tokens(line: str, tokens: list[Token], new: str) -> str:
    """`line` with each of `tokens` (all on it) replaced by `new`; rename and the bug injections share it."""
    for token in sorted(tokens, key=lambda t: t.col, reverse=True):
        line = line[: token.col] + new + line[token.col + len(token.text):]
    return line
