"""What the carried-edit appliers share (snippet_apply.py, diff_apply.py): their refusal, placing a
part by the one line it rewrites, joining merged lines with the input's endings, and the update
snippet of a given edit (for measuring).
Standard library only."""

from __future__ import annotations

import difflib

from backend.core.lines import split_lines, strip_line_ending

# A part with no unchanged non-blank line is placed by the one input line it rewrites: at least
# this similar, and this much more similar than any other input line.
FUZZY_ANCHOR = 0.75
FUZZY_MARGIN = 0.1
FUZZY_LINES = 3  # only a part of at most this many non-blank lines is placed that way (and it stays fast)


class SnippetRefused(ValueError):
    """The snippet cannot be placed with certainty; the message says why, `kind` which rule said no
    (one of REFUSAL_KINDS, for counting)."""

    def __init__(self, kind: str, message: str) -> None:
        assert kind in REFUSAL_KINDS, kind
        super().__init__(message)
        self.kind = kind


REFUSAL_KINDS = ("no snippet", "only markers", "empty input", "ambiguous", "no match", "unmarked edge",
                 "look-alike edge line", "unaligned context", "moved code", "no change",
                 "no diff", "malformed diff", "hunk not found")  # the last three: backend/core/diff_apply.py


def rewritten_line(rest: list[str], wanted: list[str], part_number: int) -> difflib.Match:
    """For a part whose every non-blank line is new: the one input line it plainly rewrites.

    Only for a part of at most `FUZZY_LINES` such lines (a changed line or two between blank lines).
    Each non-blank snippet line is compared with every input line; the best pair must be similar
    (ratio >= `FUZZY_ANCHOR`) and clearly better than any other input line for it (by `FUZZY_MARGIN`),
    or the part is refused. The pair is returned as a run of size 1 (it is replaced, not copied).
    """
    if sum(map(distinctive, wanted)) > FUZZY_LINES:
        raise SnippetRefused("no match",
            f"part {part_number} of the snippet has no line that matches the input; show at least one "
            "unchanged line next to the change")
    best: tuple[float, int, int] | None = None  # (ratio, input index, snippet index)
    floor = FUZZY_ANCHOR - FUZZY_MARGIN  # a pair below this can be neither the best nor its rival
    candidates = [(i, old.strip()) for i, old in enumerate(rest) if distinctive(old)]
    for j, line in enumerate(wanted):
        if not distinctive(line):
            continue
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(line.strip())  # the expensive index, built once per snippet line
        scores = []
        for i, old in candidates:
            matcher.set_seq1(old)
            # cheap upper bounds first: most input lines are ruled out without the full ratio
            if matcher.real_quick_ratio() >= floor and matcher.quick_ratio() >= floor:
                scores.append((matcher.ratio(), i))
        scores.sort(reverse=True)
        if not scores:
            continue
        top, runner_up = scores[0][0], (scores[1][0] if len(scores) > 1 else 0.0)
        if top >= FUZZY_ANCHOR and top - runner_up >= FUZZY_MARGIN and (best is None or top > best[0]):
            best = (top, scores[0][1], j)
    if best is None:
        raise SnippetRefused("no match",
            f"part {part_number} of the snippet has no line that matches the input, and none that plainly "
            "rewrites one input line; add an unchanged line above or below the change")
    return difflib.Match(best[1], best[2], 1)


def distinctive(line: str) -> bool:
    """A line with a letter or digit: one that can say where it belongs (a blank or `}` cannot)."""
    return any(ch.isalnum() for ch in line)


def ratio(old: str, new: str) -> float:
    return difflib.SequenceMatcher(None, old.strip(), new.strip(), autojunk=False).ratio()


def join_lines(lines: list[tuple[str, bool]], ending: str, *, final_break: bool) -> str:
    """Every line but the last ends with a break; a new last line follows the input's convention."""
    text: list[str] = []
    for index, (line, from_input) in enumerate(lines):
        last = index == len(lines) - 1
        if not from_input:
            line = line + ending if (not last or final_break) else line
        elif not last and not ends_with_break(line):
            line += ending
        text.append(line)
    return "".join(text)


def ends_with_break(line: str) -> bool:
    return line != strip_line_ending(line)


def dominant_ending(lines: list[str]) -> str:
    counts: dict[str, int] = {}
    for line in lines:
        end = line[len(strip_line_ending(line)):]
        if end:
            counts[end] = counts.get(end, 0) + 1
    return max(counts, key=lambda e: counts[e]) if counts else "\n"


def snippet_from_diff(source: str, target: str, *, context: int = 2, marker: str = "#") -> str | None:
    """The update snippet a careful writer would give for the edit source -> target: each changed
    region of the target with `context` unchanged lines around it, a `{marker} ... existing code ...`
    line wherever input lines are elided, in a fenced block. None when nothing changed. (What
    `apply-snippet --from-diff` measures the aligner on: real edits' snippets, several parts each.)"""
    old = [strip_line_ending(line) for line in split_lines(source)]
    new = [strip_line_ending(line) for line in split_lines(target)]
    groups = list(difflib.SequenceMatcher(None, old, new, autojunk=False).get_grouped_opcodes(context))
    if not groups or all(tag == "equal" for group in groups for tag, *_ in group):
        return None
    elided = f"{marker} ... existing code ..."
    body: list[str] = []
    for group in groups:
        first_old, first_new = group[0][1], group[0][3]
        if first_old > 0:  # input lines before this region are kept: elided
            body.append(elided)
        body.extend(new[first_new:group[-1][4]])
    if groups[-1][-1][2] < len(old):
        body.append(elided)
    return "Apply this update:\n```\n" + "\n".join(body) + "\n```"


def diff_instruction(source: str, target: str, *, context: int) -> str | None:
    """The edit source -> target as an instruction carrying a unified diff (what `diff -u` prints),
    or None when nothing changed (what `apply-snippet --from-diff N --as-diff` measures)."""
    lines = list(difflib.unified_diff(source.splitlines(), target.splitlines(), "a/file", "b/file",
                                      n=context, lineterm=""))
    return "Apply this diff:\n```diff\n" + "\n".join(lines) + "\n```" if lines else None
