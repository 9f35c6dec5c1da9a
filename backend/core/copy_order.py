"""Copies move forward: a model-written program copies each input line at most once, in order.

The shipped model sometimes copies a stretch it has already copied: on a 680-line held-out commit
it wrote `<copy lines="361-628"/>`, a gen, then `<copy lines="361-628"/>` again, until the context
was full (8,192 tokens; the output would have held those 268 lines twice). An edit program walks
through its input: an oracle program copies back over lines it has passed in 0.9 % of the 20,000
training programs (182; a short repeated line such as a blank or `}` found elsewhere, where a copy
tag is cheaper than writing it), never a long stretch on purpose. Any output can still be written
without going back (a line copied again can be written in a gen), so the rule takes away no
output, only a copy shortcut the model rarely needs and misuses when it takes it.

Past the input's last line a program adds at most one gen and ends. Once a copy has reached the
last line, any further copy goes back, and the model, when it goes on there, goes on for good:
on HumanEvalFix-JS it copied the last line, wrote a gen, copied the last line again, ... until the
loop guard or the token limit stopped it (3 of the 4 programs left unfinished, 2026-12-07); and
refusing only the copy (stop 44's first version) sent it into one gen after another instead. So
past the end the decoder refuses every copy and, once a gen has followed, any new item: what is
left is the end (and refused a copy there, the model sometimes opened the gen and wrote the copy
tag in it as text, HumanEvalFix-JS/50 and /63, so that gen may not hold `<copy`: the runtime's
check). No output is lost (one gen can hold any text). Of the 20,000 training programs,
17,636 end with the copy that reaches the last line, 109 add one item after it (108 a gen, 1 a
copy back) and none adds two (2,255 never copy the last line).

`copy_floor` says where the next copy may start; `goes_back` says whether a grammar position
commits the copy being written to start before it (a first line number that can no longer reach
the floor). The runtime refuses such tokens (backend/runtime/copy_order_guard.py); a server gets
the floor in each request's grammar.
"""

from __future__ import annotations

from collections.abc import Sequence

from backend.core.char_grammar import BETWEEN, ENDED, FIRST_LINE, IN_TAG, LAST_LINE, Core, number_reaches
from backend.core.program import CopyLines, Op


def copy_floor(ops: Sequence[Op], n_lines: int) -> int:
    """The first line the next copy may start at: one past the furthest line any copy in `ops`
    reached (1 before any copy; n_lines + 1, no copy at all, once the last line is copied)."""
    return 1 + max((op.end for op in ops if isinstance(op, CopyLines)), default=0)


def items_past_end(ops: Sequence[Op], n_lines: int) -> int | None:
    """How many items `ops` holds after its first copy of the input's last line; None before one."""
    for index, op in enumerate(ops):
        if isinstance(op, CopyLines) and op.end >= n_lines:
            return len(ops) - index - 1
    return None


def goes_back(core: Core, completed: Sequence[Op], before: Sequence[Op], n_lines: int) -> bool:
    """Whether reading a token after the ops `before`, closing the ops `completed` on the way to
    grammar position `core`, makes a copy start before its `copy_floor`. A position that may still
    go either way is not; past the input's last line an opened copy tag already goes back (no
    number can reach the floor, so its first digit would be too late to refuse)."""
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
        return floor > n_lines or (bool(digits) and not number_reaches(digits, floor, n_lines))
    if mode == LAST_LINE or (mode == IN_TAG and core[1].startswith('"')):
        first: int = core[2]
        return first < floor
    return mode == IN_TAG and core[1].startswith("<c") and floor > n_lines


def goes_past_end(core: Core, completed: Sequence[Op], before: Sequence[Op], n_lines: int) -> bool:
    """Whether reading a token puts a second item after the input's last line's copy (a gen has
    followed it; only the end may come now): it completes such an item or opens one."""
    past = items_past_end([*before, *completed], n_lines)
    if past is None:
        return False
    return past > 1 or (past == 1 and core[0] not in (BETWEEN, ENDED))
