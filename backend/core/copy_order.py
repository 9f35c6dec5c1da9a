"""Copies move forward: a model-written program copies each input line at most once, in order.

The shipped model sometimes copies a stretch it has already copied: on a 680-line held-out commit
it wrote `<copy lines="361-628"/>`, a gen, then `<copy lines="361-628"/>` again, until the context
was full (8,192 tokens; the output would have held those 268 lines twice). An edit program walks
through its input: an oracle program copies back over lines it has passed in 0.9 % of the 20,000
training programs (182; a short repeated line such as a blank or `}` found elsewhere, where a copy
tag is cheaper than writing it), never a long stretch on purpose. Any output can still be written
without going back (a line copied again can be written in a gen), so the rule takes away no
output, only a copy shortcut the model rarely needs and misuses when it takes it.

Once every line is copied the rule is off: a model that wants to copy then is done, and refusing
the copy only pushed it into writing gens (on HumanEvalFix-Python, whose inputs are a few lines,
`<copy lines="1-1"/>`, a gen, and the copy refused: gens until the token cap). So the copy is let
through there, as before the rule.

`copy_floor` says where the next copy may start; `goes_back` says whether a grammar position
commits the copy being written to start before it (a first line number that can no longer reach
the floor). The runtime refuses such tokens (backend/runtime/copy_order_guard.py); a server gets
the floor in each request's grammar.
"""

from __future__ import annotations

from collections.abc import Sequence

from backend.core.char_grammar import FIRST_LINE, IN_TAG, LAST_LINE, Core, number_reaches
from backend.core.program import CopyLines, Op


def copy_floor(ops: Sequence[Op], n_lines: int) -> int:
    """The first line the next copy may start at: one past the furthest line any copy in `ops`
    reached; 1 before any copy, and 1 again once every one of the `n_lines` lines is copied (the
    rule is off then, see above)."""
    floor = 1 + max((op.end for op in ops if isinstance(op, CopyLines)), default=0)
    return floor if floor <= n_lines else 1


def goes_back(core: Core, completed: Sequence[Op], before: Sequence[Op], n_lines: int) -> bool:
    """Whether reading a token after the ops `before`, closing the ops `completed` on the way to
    grammar position `core`, makes a copy start before its `copy_floor`. A position that may still
    go either way is not."""
    floor = copy_floor(before, n_lines)
    if completed:  # rare: a token that closes an item; the floor moves with each copy it closed
        ops = list(before)
        for op in completed:
            if isinstance(op, CopyLines) and op.start < copy_floor(ops, n_lines):
                return True
            ops.append(op)
        floor = copy_floor(ops, n_lines)
    mode = core[0]
    if mode == FIRST_LINE:
        digits: str = core[1]
        return bool(digits) and not number_reaches(digits, floor, n_lines)
    if mode == LAST_LINE or (mode == IN_TAG and core[1].startswith('"')):
        first: int = core[2]
        return first < floor
    return False
