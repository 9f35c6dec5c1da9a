"""Verifiable edit tasks on a code window, each with an instruction in varied natural wording.

An edit is a set of line operations on the window (`LineOps`: 0-based line index -> the lines that
replace it; `[]` deletes it, `[new, old]` inserts before it), so several edits combine when they touch
different lines, and the target is exact by construction. Line numbers in instructions are 1-based,
as the prompt shows the input. Kinds:

    rename        an identifier renamed at every code occurrence in the window
    literal       a number or string literal changed on a named line
    delete_line   one statement line deleted          delete_block  a block (header + body) deleted
    insert        a comment, an import, a docstring or a statement inserted at a described place
    replace_line  a line replaced by a given new line
    multi         two or three of the line edits above at once
    snippet       "apply this update": the changed region with `... existing code ...` markers
    fix_bug       an injected bug (operator swap, off-by-one, wrong variable, inverted condition) to fix:
                  the source is the buggy window, the target the original

Standard library only. Every generator returns None when the window offers no place for its kind.
The generators live in `line_ops` (the `LineOps` representation), `line_edits` (rename .. replace_line),
`bug_edits` (the injected bugs) and `combined_edits` (multi, snippet); this module names the kinds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from backend.training.bug_edits import fix_bug
from backend.training.combined_edits import multi, snippet
from backend.training.line_edits import delete_block, delete_line, insert, literal, rename, replace_line
from backend.training.line_ops import EditMaker, apply_ops


@dataclass(frozen=True)
class Edit:
    kind: str
    instruction: str
    source: str
    target: str


# ---------------------------------------------------------------------------------------------
# One edit of a named kind
# ---------------------------------------------------------------------------------------------

SINGLE_KINDS: dict[str, EditMaker] = {
    "rename": rename, "literal": literal, "delete_line": delete_line, "delete_block": delete_block,
    "insert": insert, "replace_line": replace_line, "multi": multi, "snippet": snippet,
}
KINDS = (*SINGLE_KINDS, "fix_bug")


def make_edit(window: str, language: str, kind: str, rng: random.Random) -> Edit | None:
    """An edit of `kind` on `window`, or None when the window has no place for it."""
    lines = window.splitlines(keepends=True)
    if kind == "fix_bug":
        found = fix_bug(lines, language, rng)
        if found is None:
            return None
        source, instruction, target = found
        return Edit(kind, instruction, source, target) if source != target else None
    single = SINGLE_KINDS[kind](lines, language, rng)
    if single is None:
        return None
    ops, instruction = single
    target = apply_ops(lines, ops)
    return Edit(kind, instruction, window, target) if target != window else None
