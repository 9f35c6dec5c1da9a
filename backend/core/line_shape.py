"""The shape an instruction fixes for its program: a constraint on top of the copy-as-decode grammar.

Some instructions say where the edit goes. "Rename `total` to `subtotal`" rewrites every line holding
`total` and keeps the others; "Delete lines 4-6" drops three lines and keeps the rest; "Add `pass`
after line 9" keeps every line and writes new ones between lines 9 and 10; "Change 1 to 2 on line
12" rewrites line 12. The 135M model mostly gets such places wrong: it copies the line it should
rewrite, skips a neighbour, stops a copy one line early (docs/results.md). A `LineShape` lists the
input as slots, front to back: a kept line (copied as it is), a rewritten line (a gen writes it,
line for line), a dropped line (in no op) and an insertion point (a gen of one or more new lines).
The program must read the slots in order: each copy starts at the next kept line and takes only
kept lines; a gen starts on a rewritten line and writes at most their run, or fills an insertion
point; dropped lines are skipped; the program ends only when every slot is read. Within the shape,
what each gen says, and where a copy or a gen is split, stays the model's choice.

`LineShape.allows` judges the grammar position a token leads to: whether the program can still be
finished in the shape. Every position it allows extends to a valid program in the shape, as the
grammar's own prefixes extend to valid programs (backend/core/char_grammar.py). A decoder refuses
tokens it rejects (backend/runtime/shape_guard.py). Positions are 1-based slot numbers; without
drops and insertions slot n is input line n. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from backend.core.char_grammar import FIRST_LINE, IN_GEN, IN_TAG, LAST_LINE, Core, number_in_range
from backend.core.program import CopyLines, Gen, Op

KEEP, REWRITE, DROP, INSERT = "keep", "rewrite", "drop", "insert"
# An insertion point takes at most this many new lines: an inserted comment, import or statement is
# one line; the bound stops a gen that never closes.
MAX_INSERTED_LINES = 8


def gen_line_count(text: str) -> int:
    """How many lines a gen writing `text` stands for: its lines, a last one without an ending
    included."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


@dataclass(frozen=True)
class LineShape:
    """`slots`: (kind, line) front to back; an INSERT slot's line is the input line it follows (0:
    the top). `n_lines`: the input's line count. Build one with `LineShape.build`."""

    slots: tuple[tuple[str, int], ...]
    n_lines: int

    @classmethod
    def build(cls, n_lines: int, rewrite: Iterable[int] = (), drop: Iterable[int] = (),
              insert_after: Iterable[int] = ()) -> LineShape:
        """The shape over input lines 1..n_lines: `rewrite` lines written by gens, `drop` lines
        left out, new lines inserted after each line of `insert_after` (0: before line 1), the
        rest kept. ValueError when a line is both rewritten and dropped or out of range."""
        rewritten, dropped, points = set(rewrite), set(drop), set(insert_after)
        if rewritten & dropped or not all(1 <= n <= n_lines for n in rewritten | dropped) \
                or not all(0 <= n <= n_lines for n in points):
            raise ValueError("a line shape names lines outside the input or one line twice")
        slots = [(INSERT, 0)] if 0 in points else []
        for line in range(1, n_lines + 1):
            slots.append((REWRITE if line in rewritten else DROP if line in dropped else KEEP, line))
            if line in points:
                slots.append((INSERT, line))
        return cls(tuple(slots), n_lines)

    @property
    def end(self) -> int:
        """The position after the last slot: the program may end there."""
        return len(self.slots) + 1

    def kind(self, position: int) -> str | None:
        return self.slots[position - 1][0] if position < self.end else None

    def line(self, position: int) -> int:
        return self.slots[position - 1][1]

    def skip_dropped(self, position: int) -> int:
        while self.kind(position) == DROP:
            position += 1
        return position

    def run(self, position: int, kind: str) -> int:
        """How many consecutive slots of `kind` start at `position`."""
        count = 0
        while self.kind(position + count) == kind:
            count += 1
        return count

    def copy_end_limit(self, position: int) -> int:
        """The last input line a copy starting at `position` may take (one less than its first
        line when that slot is not a kept line)."""
        if self.kind(position) != KEEP:
            return self.line(position) - 1 if position < self.end else self.n_lines
        return self.line(position) + self.run(position, KEEP) - 1

    def gen_room(self, position: int) -> int:
        """How many lines a gen opened at `position` may write (0: no gen here)."""
        kind = self.kind(position)
        return self.run(position, REWRITE) if kind == REWRITE else MAX_INSERTED_LINES if kind == INSERT else 0

    def after_gen(self, position: int, written: int) -> int:
        """The position after a gen of `written` lines opened at `position` (an insertion point is
        filled by one gen, a rewritten line by one of its lines)."""
        return position + (1 if self.kind(position) == INSERT else written)

    def covered(self, ops: Sequence[Op], start: int | None = None) -> int | None:
        """The position after `ops` read from `start` (the first slot), or None when some op breaks
        the shape: a copy that does not start at the next kept line or takes a line that is not
        kept, a gen off a rewritten line or insertion point or longer than its room there, or a
        gen that leaves the ending off a line the input goes on after."""
        position = self.skip_dropped(1 if start is None else start)
        for op in ops:
            if isinstance(op, CopyLines):
                if self.kind(position) != KEEP or op.start != self.line(position) \
                        or op.end > self.copy_end_limit(position):
                    return None
                position += op.end - op.start + 1
            elif isinstance(op, Gen):
                written = gen_line_count(op.text)
                if written == 0 or written > self.gen_room(position):
                    return None
                position = self.after_gen(position, written)
                if not op.text.endswith("\n") and self.skip_dropped(position) < self.end:
                    return None
            position = self.skip_dropped(position)
        return position

    def gen_is_full(self, position: int, text: str) -> bool:
        """Whether a gen opened at `position` has written all the lines it may (`text` so far)."""
        return text.count("\n") >= self.gen_room(position)

    def allows(self, core: Core, gen_text: str, before: Sequence[Op], completed: Sequence[Op]) -> bool:
        """Whether a program that finished `before`, then (with one more token) `completed`, and
        now stands at grammar position `core` (`gen_text`: an open gen's text so far, without a
        trailing part of '</gen>') can still end in the shape. Ending is `may_end`'s question."""
        position = self.covered(before)
        position = self.covered(completed, position) if position is not None else None
        if position is None:
            return False
        mode, lit = core[0], core[1] if core[0] == IN_TAG else ""
        if lit == "<":  # a copy or a gen opens: some slot must be left
            return position < self.end
        if lit.startswith("<g"):  # a gen opens only where it may write
            return self.gen_room(position) > 0
        if mode == IN_GEN:  # at most its room's lines, nothing after the last one's end
            lines, room = gen_text.count("\n"), self.gen_room(position)
            return lines < room or (lines == room and gen_text.endswith("\n"))
        if lit.startswith("<c") or mode == FIRST_LINE:  # a copy starts at the next kept line
            digits = core[1] if mode == FIRST_LINE else ""
            return self.kind(position) == KEEP and str(self.line(position)).startswith(digits)
        if mode == LAST_LINE:
            first, digits = core[2], core[1]
            if self.kind(position) != KEEP or first != self.line(position):
                return False
            return not digits or number_in_range(digits, first, self.copy_end_limit(position))
        if lit.startswith('"'):  # the line numbers are read, the tag not closed
            return bool(self.kind(position) == KEEP and core[2] == self.line(position)
                        and core[3] <= self.copy_end_limit(position))
        return True

    def may_end(self, ops: Sequence[Op], rest: tuple[int, int] | None) -> bool:
        """Whether the program `ops` may end now, when ending copies `rest` (first, last) too, or
        nothing: only with every slot read, a copied rest taking only kept lines."""
        position = self.covered(ops)
        if position is None:
            return False
        if rest is not None:
            position = self.covered([CopyLines(*rest)], position)
        return position == self.end
