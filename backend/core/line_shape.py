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
point; dropped lines are skipped; the program ends only when every slot is read. Where the
instruction also fixes a line's text (`LineText`: a quoted line, a literal changed, a name renamed),
the gen there must write one of its options; otherwise what each gen says, and where a run of
rewritten lines is split between gens, stays the model's choice.

`LineShape.allows` judges the grammar position a token leads to: whether the program can still be
finished in the shape. Every position it allows extends to a valid program in the shape, as the
grammar's own prefixes extend to valid programs (backend/core/char_grammar.py). A decoder refuses
tokens it rejects (backend/runtime/shape_guard.py). A copy the model writes runs to the end of its
run of kept lines: where a copy is split changes no output, and a copy cut short at a refused digit
("1-12" where the model meant "1-126" past line 62, the end of its run) made the model go on in
one-line copies until the token limit (dev/00019). `covered` still accepts split copies (the
decoder's copied rest, a program read back). Positions are 1-based slot numbers; without drops and
insertions slot n is input line n. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from backend.core.char_grammar import FIRST_LINE, IN_GEN, IN_TAG, LAST_LINE, Core
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
class LineText:
    """The one line a gen must write where the instruction quotes it: `text` with its ending, after
    one of `indents` ("Add `pass` after line 9": the model picks among the input's indentations,
    the likeliest first), or exactly ("Change 1 to 2 on line 12": line 12 with that one change)."""

    text: str
    indents: tuple[str, ...] = ("",)

    def whole(self, written: str) -> str | None:
        """The first whole line `written` is a start of, else None."""
        return next((indent + self.text for indent in self.indents if (indent + self.text).startswith(written)), None)

    def is_whole(self, text: str) -> bool:
        return any(indent + self.text == text for indent in self.indents)


@dataclass(frozen=True)
class LineShape:
    """`slots`: (kind, line) front to back; an INSERT slot's line is the input line it follows (0:
    the top). `n_lines`: the input's line count. `texts`: (position, the lines a one-line gen there
    may write) where the instruction quotes them. Build one with `LineShape.build`."""

    slots: tuple[tuple[str, int], ...]
    n_lines: int
    texts: tuple[tuple[int, tuple[LineText, ...]], ...] = ()

    @classmethod
    def build(cls, n_lines: int, rewrite: Iterable[int] = (), drop: Iterable[int] = (),
              insert_after: Iterable[int] = (),
              texts: Mapping[tuple[str, int], Sequence[LineText]] | None = None) -> LineShape:
        """The shape over input lines 1..n_lines: `rewrite` lines written by gens, `drop` lines
        left out, new lines inserted after each line of `insert_after` (0: before line 1), the
        rest kept; `texts`: for a slot (REWRITE, line) or (INSERT, line), the lines its gen may
        write (one line, one of these). ValueError when a line is both rewritten and dropped, out
        of range, or texts name a slot the shape lacks."""
        rewritten, dropped, points = set(rewrite), set(drop), set(insert_after)
        if rewritten & dropped or not all(1 <= n <= n_lines for n in rewritten | dropped) \
                or not all(0 <= n <= n_lines for n in points):
            raise ValueError("a line shape names lines outside the input or one line twice")
        slots = [(INSERT, 0)] if 0 in points else []
        for line in range(1, n_lines + 1):
            slots.append((REWRITE if line in rewritten else DROP if line in dropped else KEEP, line))
            if line in points:
                slots.append((INSERT, line))
        texts = texts or {}
        if not set(texts) <= set(slots):
            raise ValueError("texts name a slot the line shape lacks")
        return cls(tuple(slots), n_lines,
                   tuple((slots.index(slot) + 1, tuple(texts[slot])) for slot in sorted(texts, key=slots.index)))

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

    def line_texts(self, position: int) -> tuple[LineText, ...]:
        """The lines a gen at `position` may write ((): any text)."""
        return next((options for at, options in self.texts if at == position), ())

    def gen_lines(self, position: int, written: str) -> list[tuple[int, str]]:
        """(slot, text) of each line of `written` by a gen opened at `position`, a last partial
        one included ("" after a line end): a rewrite's lines fill one slot each, an insertion's
        all fill its one slot."""
        pieces = written.split("\n")
        texts = [piece + "\n" for piece in pieces[:-1]] + [pieces[-1]]
        step = 0 if self.kind(position) == INSERT else 1
        return [(position + index * step, text) for index, text in enumerate(texts)]

    def text_fits(self, position: int, written: str) -> bool:
        """Whether a gen at `position` that wrote `written` can still write a line each of its
        slots allows: each whole line one of its slot's, the last one a start of one."""
        *whole, (last_slot, last) = self.gen_lines(position, written)
        return all(self._allowed_line(slot, text) for slot, text in whole) \
            and (not self.line_texts(last_slot) or any(o.whole(last) is not None for o in self.line_texts(last_slot)))

    def text_to_write(self, position: int, written: str) -> str | None:
        """The rest of the first line the slot being written after `written` allows (None: any)."""
        slot, last = self.gen_lines(position, written)[-1]
        wholes = (option.whole(last) for option in self.line_texts(slot))
        return next((whole[len(last):] for whole in wholes if whole is not None), None)

    def _allowed_line(self, slot: int, text: str) -> bool:
        options = self.line_texts(slot)
        return not options or any(option.is_whole(text) for option in options)

    def gen_room(self, position: int) -> int:
        """How many lines a gen opened at `position` may write (0: no gen here)."""
        kind = self.kind(position)
        if kind == INSERT and self.line_texts(position):
            return 1
        return self.run(position, REWRITE) if kind == REWRITE else MAX_INSERTED_LINES if kind == INSERT else 0

    def after_gen(self, position: int, written: int) -> int:
        """The position after a gen of `written` lines opened at `position` (an insertion point is
        filled by one gen, a rewritten line by one of its lines)."""
        return position + (1 if self.kind(position) == INSERT else written)

    def covered(self, ops: Sequence[Op], start: int | None = None, *, whole_runs: bool = False) -> int | None:
        """The position after `ops` read from `start` (the first slot), or None when some op breaks
        the shape: a copy that does not start at the next kept line or takes a line that is not
        kept (or, `whole_runs`, stops short of its run's end), a gen off a rewritten line or
        insertion point or longer than its room there, or a gen that leaves the ending off a line
        the input goes on after."""
        position = self.skip_dropped(1 if start is None else start)
        for op in ops:
            if isinstance(op, CopyLines):
                limit = self.copy_end_limit(position)
                if self.kind(position) != KEEP or op.start != self.line(position) or op.end > limit \
                        or (whole_runs and op.end < limit):
                    return None
                position += op.end - op.start + 1
            elif isinstance(op, Gen):
                if not self.gen_may_close(position, op.text):
                    return None
                position = self.after_gen(position, gen_line_count(op.text))
            position = self.skip_dropped(position)
        return position

    def gen_may_close(self, position: int, text: str) -> bool:
        """Whether a gen opened at `position` may close having written `text`: at least one line,
        at most its room, each line one its slot allows, every line with its ending unless the
        input ends after it."""
        written = gen_line_count(text)
        if written == 0 or written > self.gen_room(position) or not self._whole_text(position, text):
            return False
        return text.endswith("\n") or self.skip_dropped(self.after_gen(position, written)) == self.end

    def _whole_text(self, position: int, text: str) -> bool:
        lines = self.gen_lines(position, text)
        return all(self._allowed_line(slot, line) for slot, line in lines if line)

    def gen_is_full(self, position: int, text: str) -> bool:
        """Whether a gen opened at `position` has written all the lines it may (`text` so far)."""
        return text.count("\n") >= self.gen_room(position)

    def allows(self, core: Core, gen_text: str, before: Sequence[Op], completed: Sequence[Op]) -> bool:
        """Whether a program that finished `before`, then (with one more token) `completed`, and
        now stands at grammar position `core` (`gen_text`: an open gen's text so far, without a
        trailing part of '</gen>') can still end in the shape. Ending is `may_end`'s question."""
        position = self.covered(before)
        # a copy the model closes now runs to its run's end (a closing '"/>' may come in one token)
        position = self.covered(completed, position, whole_runs=True) if position is not None else None
        if position is None:
            return False
        mode, lit = core[0], core[1] if core[0] == IN_TAG else ""
        if lit == "<":  # a copy or a gen opens: some slot must be left
            return position < self.end
        if lit.startswith("<g"):  # a gen opens only where it may write
            return self.gen_room(position) > 0
        if mode == IN_GEN:  # at most its room's lines, nothing after the last one's end
            # A trailing part of '</gen>' is text or the gen's close: one of the two must be possible.
            as_text = gen_text + "</gen>"[: core[1]]
            lines, room = as_text.count("\n"), self.gen_room(position)
            fits = lines < room or (lines == room and as_text.endswith("\n"))
            return (fits and self.text_fits(position, as_text)) or (core[1] > 0 and self.gen_may_close(position, gen_text))
        if lit.startswith("<c") or mode == FIRST_LINE:  # a copy starts at the next kept line
            digits = core[1] if mode == FIRST_LINE else ""
            return self.kind(position) == KEEP and str(self.line(position)).startswith(digits)
        if mode == LAST_LINE:  # a copy runs to the end of its kept run (see `copy_end_limit`)
            first, digits = core[2], core[1]
            if self.kind(position) != KEEP or first != self.line(position):
                return False
            return str(self.copy_end_limit(position)).startswith(digits)
        if lit.startswith('"'):  # the line numbers are read, the tag not closed
            return bool(self.kind(position) == KEEP and core[2] == self.line(position)
                        and core[3] == self.copy_end_limit(position))
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
