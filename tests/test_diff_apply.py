"""Unified diffs carried by an instruction (backend/core/diff_apply.py): applied as `patch` with no
fuzz, or refused with the reason."""

import difflib
import textwrap

import pytest

from backend.core.diff_apply import apply_unified_diff, find_unified_diff, parse_hunks
from backend.core.snippet_apply import REFUSAL_KINDS, SnippetRefused

SOURCE = textwrap.dedent("""\
    def area(w, h):
        return w * h


    def perimeter(w, h):
        return 2 * (w + h)


    def describe(w, h):
        return f"{w}x{h}"
    """)


def diff_of(old: str, new: str, *, context: int = 2, strip_blank_context: bool = False) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "a/shapes.py", "b/shapes.py",
                                      n=context, lineterm=""))
    if strip_blank_context:  # what chat tools often do to a blank context line
        lines = ["" if line == " " else line for line in lines]
    return "Apply this diff:\n```diff\n" + "\n".join(lines) + "\n```"


@pytest.mark.parametrize("context", [0, 1, 3])
@pytest.mark.parametrize("strip_blank_context", [False, True])
def test_a_diff_of_two_texts_applies_back(context, strip_blank_context):
    target = SOURCE.replace("2 * (w + h)", "2 * w + 2 * h").replace('f"{w}x{h}"', 'f"{w} by {h}"')
    target = target.replace("def area(w, h):\n", "def area(w, h):\n    # flat shapes only\n")
    assert apply_unified_diff(SOURCE, diff_of(SOURCE, target, context=context,
                                              strip_blank_context=strip_blank_context)) == target


def test_a_repeated_old_side_is_placed_nearest_its_header_line():
    source = "x = 1\n" + "".join(f"n{i} = {i}\n" for i in range(20)) + "x = 1\n"
    instruction = "```diff\n@@ -22,1 +22,1 @@\n-x = 1\n+x = 2\n```"
    assert apply_unified_diff(source, instruction) == source[: source.rindex("x = 1")] + "x = 2\n"


def test_crlf_and_no_final_newline_are_kept():
    source = "a = 1\r\nb = 2\r\nc = 3"
    instruction = "```diff\n@@ -1,3 +1,4 @@\n a = 1\n-b = 2\n+b = 20\n+bb = 21\n c = 3\n```"
    assert apply_unified_diff(source, instruction) == "a = 1\r\nb = 20\r\nbb = 21\r\nc = 3"


# (case, instruction, refusal kind)
REFUSALS = [
    ("no diff", "Make it faster.", "no diff"),
    ("a fence without a hunk header", "```diff\n-a\n+b\n```", "no diff"),
    ("a hunk made against another version", "```diff\n@@ -1,2 +1,2 @@\n def area(w, h):\n-    return w + h\n+    return 0\n```",
     "hunk not found"),
    ("a line that is not part of a diff", "```diff\n@@ -1,2 +1,2 @@\n def area(w, h):\n~    return w * h\n```", "malformed diff"),
    ("a diff that changes nothing", "```diff\n@@ -1,2 +1,2 @@\n def area(w, h):\n     return w * h\n```", "no change"),
]


@pytest.mark.parametrize("case, instruction, kind", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_case__instruction__refused_with_kind(case, instruction, kind):
    with pytest.raises(SnippetRefused) as refused:
        apply_unified_diff(SOURCE, instruction)
    assert refused.value.kind == kind and kind in REFUSAL_KINDS and "\n" not in str(refused.value)


def test_two_places_equally_near_the_header_are_refused():
    with pytest.raises(SnippetRefused, match="fits lines 2 and 4 equally") as refused:
        apply_unified_diff("a\nx\nb\nx\nc\n", "```diff\n@@ -3,1 +3,1 @@\n-x\n+y\n```")
    assert refused.value.kind == "ambiguous"


def test_find_and_parse():
    lines = find_unified_diff("x\n```\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n```")
    assert lines is not None
    (hunk,) = parse_hunks(lines)
    assert hunk.old_start == 1 and hunk.lines == (("-", "a"), ("+", "b")) and hunk.old == ["a"]
    assert find_unified_diff("```\n# ... existing code ...\n```") is None


def test_real_fixes_as_diffs_apply_exactly():
    """HumanEvalFix-JS: every case's own fix as a diff (2 context lines) applies back exactly."""
    from backend.data.corpora import load_corpus

    cases = load_corpus("humanevalpack-js")[:40]
    for case in cases:
        assert apply_unified_diff(case.source, diff_of(case.source, case.target)) == case.target, case.id
