"""Copies move forward: a model-written program copies each input line at most once, in order.

The shipped model sometimes copies a stretch it has already copied: on a 680-line held-out commit
it wrote `<copy lines="361-628"/>`, a gen, then `<copy lines="361-628"/>` again, until the context
was full (8,192 tokens; the output would have held those 268 lines twice). An edit program walks
through its input: an oracle program copies back over lines it has passed in 0.9 % of the 20,000
training programs (182; a short repeated line such as a blank or `}` found elsewhere, where a copy
tag is cheaper than writing it), never a long stretch on purpose. Any output can still be written
without going back (a line copied again can be written in a gen), so the rule takes away no
output, only a copy shortcut the model rarely needs and misuses when it takes it.

`copy_floor` says where the next copy may start; `goes_back` says whether a grammar position
commits the copy being written to start before it (a first line number that can no longer reach
the floor, or a copy opened when every line is copied). The runtime refuses such tokens
(backend/runtime/copy_order_guard.py); a server gets the floor in each request's grammar.
"""

from __future__ import annotations

from collections.abc import Sequence

from backend.core.char_grammar import FIRST_LINE, IN_TAG, LAST_LINE, Core, number_reaches
from backend.core.program import CopyLines, Op


def copy_floor(ops: Sequence[Op]) -> int:
    """The first line the next copy may start at: one past the furthest line any copy in `ops`
    reached (1 before any copy)."""
    return 1 + max((op.end for op in ops if isinstance(op, CopyLines)), default=0)


def goes_back(core: Core, completed: Sequence[Op], floor: int, n_lines: int) -> bool:
    """Whether reading a token that led to grammar position `core`, closing the ops `completed` on
    the way, makes a copy start before `floor` (the floor before those ops), or opens a copy when
    no line is left to copy (`floor > n_lines`). A position that may still go either way is not."""
    for op in completed:
        if isinstance(op, CopyLines):
            if op.start < floor:
                return True
            floor = max(floor, op.end + 1)
    mode = core[0]
    if mode == IN_TAG and core[1].startswith("<c"):
        return floor > n_lines
    if mode == FIRST_LINE:
        digits: str = core[1]
        return floor > n_lines if not digits else not number_reaches(digits, floor, n_lines)
    if mode == LAST_LINE or (mode == IN_TAG and core[1].startswith('"')):
        first: int = core[2]
        return first < floor
    return False
