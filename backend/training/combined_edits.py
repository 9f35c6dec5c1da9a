"""Combined edits: several line edits at once (`multi`) and fast-apply update snippets (`snippet`).
Standard library only.
"""

from __future__ import annotations

import random

from backend.training.bug_edits import mutate_line
from backend.training.line_edits import LINE_EDITS, literal
from backend.training.line_ops import LineOps, Single, comment_marker

# ---------------------------------------------------------------------------------------------
# Combinations: several edits, update snippets
# ---------------------------------------------------------------------------------------------

def multi(lines: list[str], language: str, rng: random.Random) -> Single | None:
    wanted = rng.choice((2, 2, 3))
    ops: LineOps = {}
    steps: list[str] = []
    for _ in range(wanted * 3):
        name = rng.choice(sorted(LINE_EDITS))
        found = LINE_EDITS[name](lines, language, rng)
        if found is None:
            continue
        new_ops, text = found
        if 0 in new_ops and name == "insert" and 0 in ops:
            continue
        if any(abs(a - b) <= 1 for a in new_ops for b in ops):
            continue
        ops.update(new_ops)
        steps.append(text)
        if len(steps) == wanted:
            break
    if len(steps) < 2:
        return None
    joiner = rng.choice(("numbered", "and", "lines"))
    if joiner == "numbered":
        text = "Make these changes:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
    elif joiner == "lines":
        text = "\n".join(steps)
    else:
        text = " Then ".join(s.rstrip(".") + "." for s in steps)
    return ops, text


def snippet(lines: list[str], language: str, rng: random.Random) -> Single | None:
    """Fast-apply: the instruction shows the changed region between `... existing code ...` markers."""
    edit = rng.choice(("replace_line", "literal", "insert", "delete_line", "replace_two"))
    if edit == "replace_two":
        first = mutate_line(lines, language, rng) or literal(lines, language, rng)
        second = literal(lines, language, rng)
        if first is None or second is None:
            return None
        ops = {**first[0], **second[0]}
        if max(ops) - min(ops) > 8:
            return None
    else:
        found = LINE_EDITS[edit](lines, language, rng)
        if found is None:
            return None
        ops = found[0]
    low, high = min(ops), max(ops)
    before = max(0, low - rng.choice((1, 2, 2, 3)))
    after = min(len(lines) - 1, high + rng.choice((1, 2, 2, 3)))
    shown = [part for index in range(before, after + 1) for part in ops.get(index, [lines[index]])]
    marker = f"{comment_marker(language)} ... existing code ..."
    body = ([marker + "\n"] if before > 0 else []) + shown + ([marker + "\n"] if after < len(lines) - 1 else [])
    if shown == lines[before:after + 1] or not "".join(shown).strip():
        return None
    lead = rng.choice(("Apply this update:", "Apply the following edit (unchanged code is elided):",
                       "Update the code as shown:", "Merge this snippet into the file:", "Apply this change:"))
    return ops, f"{lead}\n```\n{''.join(body)}```"
