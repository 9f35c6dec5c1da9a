"""The shape of a rename's program: a constraint on top of the copy-as-decode grammar.

"Rename `total` to `subtotal`" has to rewrite every line holding `total` (backend/core/locate.py
finds them) and keeps every other line, in order, one output line per input line. So its program
reads the input front to back: each copy starts at the line after what the program has covered so
far and takes no kept-out line (one holding the old name); a gen starts only on a kept-out line and
writes at most the run of kept-out lines there, line for line, each line with its ending; and the
program ends only when the input is covered. The 135M model mostly copies such lines unchanged, puts
gens elsewhere and skips lines (docs/results.md: rename 0/22 held-out). Within the shape, where the
gens go is fixed; what each rewritten line says, and where a copy or a gen is split, stays the
model's choice. (Forcing one gen per run of kept-out lines was measured and is worse: refused its
usual close after one line, the model pads the gen with blank lines; 9/22 renames exact against
11/22.)

`RenameShape.allows` judges the grammar position a token leads to: whether the program can still
be finished in the shape. Every position it allows extends to a valid program in the shape, as the
grammar's own prefixes extend to valid programs (backend/core/char_grammar.py). A decoder refuses
tokens it rejects (backend/runtime/rename_guard.py). Standard library only.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from backend.core.char_grammar import FIRST_LINE, IN_GEN, IN_TAG, LAST_LINE, Core, number_in_range
from backend.core.program import CopyLines, Gen, Op


def gen_line_count(text: str) -> int:
    """How many input lines a gen writing `text` stands for: its lines, a last one without an
    ending included."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


@dataclass(frozen=True)
class RenameShape:
    """`keep_out`: the sorted input lines a rename must rewrite; `n_lines`: the input's line count."""

    keep_out: tuple[int, ...]
    n_lines: int

    def kept_out(self, line: int) -> bool:
        index = bisect_left(self.keep_out, line)
        return index < len(self.keep_out) and self.keep_out[index] == line

    def kept_out_run(self, line: int) -> int:
        """How many consecutive kept-out lines start at `line` (0 when `line` is free)."""
        count = 0
        while self.kept_out(line + count):
            count += 1
        return count

    def copy_end_limit(self, first: int) -> int:
        """The last line a copy starting at `first` may take (first - 1 when `first` is kept out)."""
        index = bisect_left(self.keep_out, first)
        return min(self.keep_out[index] - 1, self.n_lines) if index < len(self.keep_out) else self.n_lines

    def covered(self, ops: Sequence[Op], start: int = 1) -> int | None:
        """The next input line after `ops` read from line `start`, or None when some op breaks the
        shape: a copy that does not start there or takes a kept-out line, a gen that does not
        start on a kept-out line or writes more lines than the kept-out run there, or leaves the
        ending off a line other than the input's last."""
        line = start
        for op in ops:
            if isinstance(op, CopyLines):
                if op.start != line or op.end > self.copy_end_limit(line):
                    return None
                line = op.end + 1
            elif isinstance(op, Gen):
                written = gen_line_count(op.text)
                if written == 0 or written > self.kept_out_run(line):
                    return None
                line += written
                if not op.text.endswith("\n") and line <= self.n_lines:
                    return None
        return line

    def gen_is_full(self, line: int, text: str) -> bool:
        """Whether a gen opened at `line` has written all the lines it may (`text` so far)."""
        return text.count("\n") >= self.kept_out_run(line)

    def allows(self, core: Core, gen_text: str, before: Sequence[Op], completed: Sequence[Op]) -> bool:
        """Whether a program that finished `before`, then (with one more token) `completed`, and
        now stands at grammar position `core` (`gen_text`: an open gen's text so far, without a
        trailing part of '</gen>') can still end in the shape. Ending is `may_end`'s question."""
        line = self.covered(before)
        line = self.covered(completed, line) if line is not None else None
        if line is None:
            return False
        mode, lit = core[0], core[1] if core[0] == IN_TAG else ""
        if lit == "<":  # a copy or a gen opens: some input line must be left
            return line <= self.n_lines
        if lit.startswith("<g"):  # a gen opens only on a kept-out line
            return self.kept_out(line)
        if mode == IN_GEN:  # at most the kept-out run's lines, nothing after the last one's end
            lines, run = gen_text.count("\n"), self.kept_out_run(line)
            return lines < run or (lines == run and gen_text.endswith("\n"))
        if lit.startswith("<c") or mode == FIRST_LINE:  # a copy starts at the next line, a free one
            digits = core[1] if mode == FIRST_LINE else ""
            return self.copy_end_limit(line) >= line and str(line).startswith(digits)
        if mode == LAST_LINE:
            first, digits = core[2], core[1]
            last = self.copy_end_limit(first)
            return bool(first == line and first <= last and (not digits or number_in_range(digits, first, last)))
        if lit.startswith('"'):  # the line numbers are read, the tag not closed
            return bool(core[2] == line and core[3] <= self.copy_end_limit(line))
        return True

    def may_end(self, ops: Sequence[Op], rest: tuple[int, int] | None) -> bool:
        """Whether the program `ops` may end now, when ending copies `rest` (first, last) too, or
        nothing: only with the whole input covered and no kept-out line in a copied rest."""
        line = self.covered(ops)
        if line is None:
            return False
        if rest is not None:
            if rest[0] != line or rest[1] > self.copy_end_limit(line):
                return False
            line = rest[1] + 1
        return line > self.n_lines
