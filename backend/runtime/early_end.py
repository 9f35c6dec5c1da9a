"""What the decoder does when a model-written program ends too early: it copies the rest.

A small model often ends its program right after a copy that stops short of the input's end, and
no copy reaches the last line: "Remove lines 93 to 98" of 155 came back as
`<copy lines="1-92"/><copy lines="99-99"/>` and EOS, which drops lines 100-155 without a word. In
the shipped model's held-out evaluation (80 dev cases, docs/results.md) 17 of its 61 wrong
programs ended like that. So when the model picks EOS right after a copy while no copy has
reached the last line, the decoder appends `<copy lines="E+1-N"/>` (E: the furthest line copied,
N: the input's last line) and ends there: an edit left unfinished leaves the rest of the file as
it was. Measured on those 80 cases: exact match unchanged (19: one delete gained, one deletion of
the file's last lines lost), line similarity 0.906 -> 0.950.

Some of those early ends came from a context the model had never seen: a copy ending on a
blank line was tokenised differently from training (fixed since: program_text.tokenize_before_item).
After that fix the rule still pays on the same 80 cases: exact match 19/80 with it and without
it, line similarity 0.944 against 0.922.

The price: a program that means to delete the file's last lines (it ends after a copy that stops
short of them) gets them back. 6 of the 240 dev programs do that. Users turn the rule off with
`EditEngine(copy_rest=False)` / `edit --no-copy-rest` / `evaluate --no-copy-rest`; reference replays
never use it. A remote engine applies it on the client after the server's end (backend/runtime/remote.py).
"""

from __future__ import annotations

from typing import Sequence

from backend.core.program import CopyLines, Op


def rest_to_copy(ops: Sequence[Op], n_lines: int) -> tuple[int, int] | None:
    """(first, last) input lines a program ending now should still copy, or None: the program's
    last op is a copy and no copy reached line `n_lines`."""
    if not ops or not isinstance(ops[-1], CopyLines):
        return None
    furthest = max(op.end for op in ops if isinstance(op, CopyLines))
    return (furthest + 1, n_lines) if furthest < n_lines else None


def copy_tag(first: int, last: int) -> str:
    return f'<copy lines="{first}-{last}"/>'
