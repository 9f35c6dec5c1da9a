"""An input longer than the model's context is edited through a window: the lines the instruction
is most likely about, as many as fit.

The embedded model reads 8,192 tokens. A copy-as-decode prompt holds the input once (numbered) and
the decode holds every copied line once more, so a file of more than ~3,000 tokens (a few hundred
lines of code) cannot be edited whole: half of the held-out real commits are such files
(docs/results.md). Refusing them leaves the user with nothing. Instead the model is shown one
window of the file, lines `start..end`, numbered 1..k as if it were the whole file; its edit of the
window is put back between the lines before and after it, which stay as they are.

Which window: the instruction's line references and the lines its shape changes
(backend/core/addressed.py) must be inside it, whole; among the windows that hold them, the one
whose lines hold most of the instruction's terms (backend/core/locate.py), each term weighted by
1 / the number of lines holding it, so a rare name counts more than a common word. Ties (a term on
no line, or all matches in every candidate) go to the window that centres what it holds. The edit
of lines outside the window is impossible, and a caller should say so: `SourceWindow.describe`.
Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from backend.core.addressed import line_references, requested_shape, shift_line_references
from backend.core.line_shape import KEEP, LineShape
from backend.core.lines import strip_line_ending
from backend.core.locate import MAX_CANDIDATES, instruction_terms, term_lines
from backend.core.program import GEN_CLOSE, GEN_OPEN

_COPY_TAG = re.compile(r'<copy lines="(\d+)-(\d+)"/>')
_GEN = re.compile(re.escape(GEN_OPEN) + ".*?(?:" + re.escape(GEN_CLOSE) + r"|\Z)", re.S)  # an open gen runs to the end


# The longest window the shipped model was trained on (backend/training/sources.py WINDOW_BANDS). A
# larger window is the first try (more of the file in view); when the model runs away in it, the
# edit is tried once more in a window of at most this many lines (backend/runtime/window_retry.py).
TRAINED_WINDOW_LINES = 200


class WindowError(ValueError):
    """No window of the input fits and holds the lines the instruction names."""


@dataclass(frozen=True)
class SourceWindow:
    """Input lines `start..end` (1-based, inclusive) of an input of `n_lines` lines."""

    start: int
    end: int
    n_lines: int

    @property
    def offset(self) -> int:
        """What to add to a window line number to get the input's."""
        return self.start - 1

    def describe(self) -> str:
        return f"lines {self.start}-{self.end} of {self.n_lines}"

    def split(self, lines: Sequence[str]) -> tuple[str, str, str]:
        """(the lines before the window, the window, the lines after it) as text, endings kept."""
        return ("".join(lines[: self.start - 1]), "".join(lines[self.start - 1: self.end]),
                "".join(lines[self.end:]))


def required_lines(instruction: str | None, lines: Sequence[str]) -> tuple[int, int] | None:
    """The first and last input line the window must hold: every line the instruction references by
    number and every line its shape drops, rewrites or inserts beside (None: no such line)."""
    needed = [n for first, last in line_references(instruction or "") for n in (first, last)]
    shape = requested_shape(instruction, lines)
    if shape is not None:
        needed += [max(line, 1) for kind, line in shape.slots if kind != KEEP]  # an insert at the top: after line 0
    needed = [n for n in needed if n >= 1]
    return (min(needed), max(needed)) if needed else None


def relevance(instruction: str | None, lines: Sequence[str]) -> list[float]:
    """Per input line, the summed weight of the instruction's terms it holds (1 / the number of
    lines holding the term)."""
    bare = [strip_line_ending(line) for line in lines]
    scores = [0.0] * len(bare)
    for term in instruction_terms(instruction or "")[:MAX_CANDIDATES]:
        held = term_lines(term, bare)
        for number in held:
            scores[number - 1] += 1.0 / len(held)
    return scores


def choose_window(instruction: str | None, lines: Sequence[str], costs: Sequence[int], budget: int) -> SourceWindow:
    """The window to edit: consecutive lines whose summed `costs` (tokens each line takes in the
    context) stay within `budget`, holding `required_lines`, with the most `relevance`. WindowError
    when the required lines alone exceed the budget or no line fits."""
    return best_window(relevance(instruction, lines), required_lines(instruction, lines), costs, budget)


def best_window(scores: Sequence[float], required: tuple[int, int] | None, costs: Sequence[int],
                budget: int, *, max_lines: int | None = None) -> SourceWindow:
    """`choose_window` for a caller that tries several budgets: the instruction read once into each
    line's relevance `scores` and the `required` lines; no window longer than `max_lines` lines."""
    if len(costs) != len(scores) or not scores:
        raise WindowError("a window needs the input's lines and one cost per line")
    longest = len(scores) if max_lines is None else max_lines
    best: list[tuple[float, int, int]] = []  # (score, start, end) of the best windows, 0-based inclusive
    end, total, held = -1, 0, 0.0
    for start in range(len(scores)):
        while end + 1 < len(scores) and total + costs[end + 1] <= budget and end + 1 - start < longest:
            end += 1
            total, held = total + costs[end], held + scores[end]
        if end >= start and (required is None or (start + 1 <= required[0] and required[1] <= end + 1)):
            if not best or held > best[0][0] + 1e-9:
                best = [(held, start, end)]
            elif abs(held - best[0][0]) <= 1e-9:
                best.append((held, start, end))
        if end >= start:
            total, held = total - costs[start], held - scores[start]
        else:
            end = start  # this line alone is over the budget: the next window starts after it
    if not best:
        what = f"lines {required[0]}-{required[1]}, which the instruction names, do" if required else "no line does"
        raise WindowError(f"{what} not fit in the model's context")
    _, start, end = best[len(best) // 2]  # among equals, the one that centres what they hold
    return SourceWindow(start + 1, end + 1, len(scores))


def shape_kept(instruction: str | None, lines: Sequence[str], window: SourceWindow, window_instruction: str) -> bool:
    """Whether the renumbered instruction asks of the window exactly what the instruction asks of
    the whole input: the same lines dropped, rewritten and inserted beside (each with its new text
    fixed or not), or no shape in both."""
    whole = requested_shape(instruction, lines)
    part = requested_shape(window_instruction, lines[window.start - 1: window.end])
    if whole is None or part is None:
        return whole is None and part is None
    return _changes(whole, 0) == _changes(part, window.offset)


def _changes(shape: LineShape, offset: int) -> list[tuple[str, int, bool]]:
    # the texts' indentations are the input's (the window's may differ); that a text is fixed is what counts
    texts = dict(shape.texts)
    return [(kind, line + offset, position in texts)
            for position, (kind, line) in enumerate(shape.slots, start=1) if kind != KEEP]


def renumber_copies(program: str, offset: int) -> str:
    """`program` (or a run of its tags) with every copy tag outside a gen moved `offset` lines down
    the input; a gen's text is left as written, even where it looks like a tag."""
    parts, last = [], 0
    for gen in _GEN.finditer(program):
        parts += [_shift(program[last: gen.start()], offset), gen.group(0)]
        last = gen.end()
    return "".join(parts) + _shift(program[last:], offset)


def _shift(tags: str, offset: int) -> str:
    return _COPY_TAG.sub(lambda m: f'<copy lines="{int(m[1]) + offset}-{int(m[2]) + offset}"/>', tags)


def widen_program(program: str, window: SourceWindow, *, finished: bool) -> str:
    """A program over the window as a program over the whole input: its copies renumbered, the lines
    before the window copied first and, when the program finished, the lines after it last."""
    before = f'<copy lines="1-{window.start - 1}"/>' if window.start > 1 else ""
    after = f'<copy lines="{window.end + 1}-{window.n_lines}"/>' if finished and window.end < window.n_lines else ""
    return before + renumber_copies(program, window.offset) + after


def window_instruction(instruction: str | None, window: SourceWindow) -> str | None:
    """The instruction as said of the window: its line numbers counted from the window's first line."""
    return shift_line_references(instruction, window.offset) if instruction else instruction
