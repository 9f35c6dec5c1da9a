"""An instruction that carries its edit: a unified diff (backend/core/diff_apply.py) or an update
snippet with `... existing code ...` markers (backend/core/snippet_apply.py). Either is applied
without a model when its place is certain; `SnippetRefused` says why not. Standard library only.
"""

from __future__ import annotations

from backend.core.diff_apply import apply_unified_diff, find_unified_diff
from backend.core.edit_text import SnippetRefused
from backend.core.snippet_apply import apply_update_snippet, find_update_snippet

__all__ = ["SnippetRefused", "apply_carried_edit", "carried_edit_kind"]


def carried_edit_kind(instruction: str) -> str | None:
    """"diff" or "snippet" when the instruction carries that kind of edit in a fenced block, else None.
    A diff is looked for first: its `-` and `+` lines never read as snippet markers."""
    if find_unified_diff(instruction) is not None:
        return "diff"
    if find_update_snippet(instruction) is not None:
        return "snippet"
    return None


def apply_carried_edit(source: str, instruction: str) -> str:
    """The input with the instruction's diff or snippet applied; SnippetRefused when it carries
    neither ("no snippet") or its place is not certain."""
    kind = carried_edit_kind(instruction)
    if kind == "diff":
        return apply_unified_diff(source, instruction)
    return apply_update_snippet(source, instruction)
