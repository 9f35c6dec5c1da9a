"""Fast-apply by alignment: an update snippet merged into the input without a model.

An instruction such as

    Apply this update:
    ```
    # ... existing code ...
    def area(self):
        return self.width * self.height
    # ... existing code ...
    ```

carries the changed region of the file; each `... existing code ...` marker stands for input
lines kept as they are. Placing the region is a text-alignment problem, and a deterministic one
when the snippet's context lines occur once in the input; the 135M model places it right in a
few cases in a hundred (docs/results.md). So `apply_update_snippet` merges it by alignment, and
says no (`SnippetRefused`, with the reason) whenever the placement is not certain; the caller then
lets the model write the program as before. A refusal loses nothing; a wrong merge would lose
lines silently, so every rule below errs toward refusing.

The rules (the fast-apply convention of Cursor, Morph and Relace):
- the snippet is the first fenced block (```) of the instruction with at least one marker line
  (a comment opener then `...`: `# ...`, `// ... existing code ...`, `/* ... */`, `<!-- ... -->`,
  or then words for elided code: `// existing code`, `# rest of the file unchanged`);
- markers split it into parts; each part replaces one region of the input, in order;
- no marker before the first part: the region starts at the input's first line; no marker after
  the last part: it runs to the input's last line;
- a region is placed by its longest run of context lines (lines equal to input lines, trailing
  spaces ignored) that holds a line with a letter or digit; that run must occur once in the rest of
  the input, or else one of its places must match strictly more of the part's other lines (each
  side matched on its own side of the run) than any other; nearby matching runs join it while the
  input lines they drop (more input lines than snippet lines between two runs) add up to at most
  `MAX_SILENT_DROP` on each side;
- unmatched snippet lines at a region's edge replace as many adjacent input lines as are near
  copies of them (difflib ratio >= `REWRITE`), and are otherwise inserted there, unless the next
  one only looks like the input line beside it (then it is refused: rewrite or insertion?);
- also refused: a snippet line left outside its region that is an input line (context the
  alignment could not reach: inserting it would duplicate it), a merge that inserts two consecutive
  lines the input has elsewhere or drops two the snippet shows (moved code), a part with no matching
  line that is not a plain rewrite of one input line, and a merge that changes nothing.

Lines are compared without trailing spaces, so a change of trailing spaces alone is not seen (an
LLM-written snippet often loses them; the input's are kept).

Matched lines are taken from the input byte for byte (its line endings, its last line without a
break); new lines get the input's line ending. Standard library only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from backend.core.edit_text import (
    REFUSAL_KINDS, SnippetRefused, distinctive, dominant_ending, ends_with_break, join_lines, ratio, rewritten_line,
)
from backend.core.lines import split_lines, strip_line_ending

# A marker: a comment opener, then three dots or an ellipsis, or the words such tools use for the
# elided code ("existing code", "rest of the file", "unchanged code", "remaining code").
MARKER = re.compile(
    r"^\s*(?:#|//|/\*|<!--|--|;|\*)\s*(?:\.\.\.|\u2026|"
    r"(?:\(?\s*)(?:existing code|unchanged code|(?:the )?rest of (?:the )?(?:code|file|function|class|method)"
    r"|remaining code)\b)", re.IGNORECASE)
# A fenced block: an opening fence of 3+ backticks or tildes at the start of a line, its body, and a
# closing fence of the same character, at least as long, alone on a line at its start. So code that
# itself holds ``` (a docstring's example, indented) stays inside; a block whose code has an
# unindented ``` line needs a longer fence (````), as in Markdown.
FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(.*?)^\1[`~]*[ \t]*$", re.S | re.M)
# How many input lines, in all, a part may drop between its matched runs on each side of its anchor
# (lines the snippet deletes without a marker) before further runs are treated as unrelated. Swept
# over 3, 6, 10, 20 and unbounded on snippets made from real commits: 10 merged more and wrongly
# less often than 3 (a context line the region does not reach is refused, or worse, inserted);
# unbounded let runs far away join (docs/results.md).
MAX_SILENT_DROP = 10
# How many input lines an unmarked edge (the file's start or end) may drop beyond what it replaces.
MAX_EDGE_DROP = 3
# A new line at a part's edge next to an input line at least REWRITE similar (difflib ratio) is its
# rewrite; at least LOOKALIKE similar, or with the same indentation and first word, it might be a
# rewrite or an insertion, and the part is refused.
REWRITE = 0.8
LOOKALIKE = 0.5



@dataclass(frozen=True)
class Part:
    lines: tuple[str, ...]  # snippet lines, endings stripped
    marker_before: bool
    marker_after: bool


def first_fenced_block(instruction: str, line_pattern: re.Pattern[str]) -> list[str] | None:
    """The lines (endings stripped) of the instruction's first fenced block that has a line matching
    `line_pattern`, or None."""
    for block in FENCE.finditer(instruction):
        lines = [strip_line_ending(line) for line in split_lines(block.group(2))]
        if any(line_pattern.match(line) for line in lines):
            return lines
    return None


def find_update_snippet(instruction: str) -> list[str] | None:
    """The lines of the first fenced block with a marker line, or None."""
    return first_fenced_block(instruction, MARKER)


def split_parts(lines: list[str]) -> list[Part]:
    """The snippet's parts between markers (adjacent markers count as one)."""
    parts: list[Part] = []
    current: list[str] = []
    marker_before = False
    for line in lines:
        if MARKER.match(line):
            if current:
                parts.append(Part(tuple(current), marker_before, True))
                current = []
            marker_before = True
        else:
            current.append(line)
    if current:
        parts.append(Part(tuple(current), marker_before, False))
    # a part of blank lines only between two markers says nothing
    return [part for part in parts if any(line.strip() for line in part.lines)]


def line_key(line: str) -> str:
    """What two lines are compared by: the line without its ending and trailing spaces."""
    return strip_line_ending(line).rstrip()


@dataclass(frozen=True)
class Placement:
    start: int  # first input line the part replaces (0-based, inclusive)
    end: int    # one past the last


def place_part(keys: list[str], cursor: int, part: Part, part_number: int) -> Placement:
    """Where `part` goes in the input (`keys`, normalised lines) at or after `cursor`."""
    rest = keys[cursor:]
    wanted = [line.rstrip() for line in part.lines]
    matcher = difflib.SequenceMatcher(None, rest, wanted, autojunk=False)
    anchors = [b for b in matcher.get_matching_blocks()
               if b.size and any(distinctive(line) for line in wanted[b.b:b.b + b.size])]
    if anchors:
        anchor = max(anchors, key=lambda b: b.size)
        anchor = _unique_place(rest, wanted, anchor, part_number)
    else:
        anchor = rewritten_line(rest, wanted, part_number)
    anchor = difflib.Match(cursor + anchor.a, anchor.b, anchor.size)
    lead = _extend(keys, wanted, anchor, cursor, leftward=True)
    tail = _extend(keys, wanted, anchor, cursor, leftward=False)
    start, end = lead.a, tail.a + tail.size
    start -= _similar_run(list(reversed(keys[cursor:start])), list(reversed(wanted[:lead.b])))
    end += _similar_run(keys[end:], wanted[tail.b + tail.size:])
    _refuse_duplicates(keys, wanted, start, end, lead.b, tail.b + tail.size, part_number)
    # the snippet's new lines left outside the region at each edge, next to an input line it keeps
    new_before = lead.b - (lead.a - start)
    new_after = tail.b + tail.size + (end - tail.a - tail.size)
    if part.marker_before and start > cursor and new_before > 0:
        _refuse_lookalike(keys[start - 1], wanted[new_before - 1], part_number)
    if part.marker_after and end < len(keys) and new_after < len(wanted):
        _refuse_lookalike(keys[end], wanted[new_after], part_number)
    return _unmarked_edges(keys, cursor, part, Placement(start, end), part_number)


def _unique_place(rest: list[str], wanted: list[str], anchor: difflib.Match, part_number: int) -> difflib.Match:
    """The anchor run where it occurs once; where it occurs more often, the occurrence around which
    strictly more of the part's other lines (with a letter or digit) match, if there is one."""
    run = wanted[anchor.b:anchor.b + anchor.size]
    places = [i for i in range(len(rest) - anchor.size + 1) if rest[i:i + anchor.size] == run]
    if len(places) == 1:
        return anchor
    before, after = anchor.b, len(wanted) - anchor.b - anchor.size
    scores = []
    for place in places:  # the part's lines before and after the run, matched on their own side of it
        left = rest[max(0, place - before - MAX_SILENT_DROP):place]
        right = rest[place + anchor.size:place + anchor.size + after + MAX_SILENT_DROP]
        scores.append(_matched_distinctive(left, wanted[:anchor.b]) +
                      _matched_distinctive(right, wanted[anchor.b + anchor.size:]))
    ranked = sorted(zip(scores, places), reverse=True)
    if ranked[0][0] == ranked[1][0]:
        raise SnippetRefused("ambiguous",
            f"part {part_number} of the snippet matches more than one place (its context "
            f"{run[0].strip()[:40]!r} occurs {len(places)} times); add more context lines")
    return difflib.Match(ranked[0][1], anchor.b, anchor.size)


def _matched_distinctive(inputs: list[str], snippet: list[str]) -> int:
    blocks = difflib.SequenceMatcher(None, inputs, snippet, autojunk=False).get_matching_blocks()
    return sum(distinctive(line) for block in blocks for line in snippet[block.b:block.b + block.size])


def _unmarked_edges(keys: list[str], cursor: int, part: Part, placement: Placement, part_number: int) -> Placement:
    """A part with no marker before it starts at `cursor`, one with none after it ends at the input's
    end, so it replaces the lines up to there; refused when that would drop more than `MAX_EDGE_DROP`."""
    start, end = placement.start, placement.end
    if not part.marker_before:
        dropped = start - cursor
        if dropped > MAX_EDGE_DROP:
            raise SnippetRefused("unmarked edge",
                f"part {part_number} of the snippet has no `... existing code ...` marker before it, "
                f"which would delete {dropped} lines above it; add the marker or the lines")
        start = cursor
    if not part.marker_after:
        dropped = len(keys) - end
        if dropped > MAX_EDGE_DROP:
            raise SnippetRefused("unmarked edge",
                f"part {part_number} of the snippet has no `... existing code ...` marker after it, "
                f"which would delete the {dropped} lines below it; add the marker or the lines")
        end = len(keys)
    return Placement(start, end)


def _extend(keys: list[str], wanted: list[str], anchor: difflib.Match, cursor: int, *,
            leftward: bool) -> difflib.Match:
    """The outermost matched run on one side of the anchor that still belongs to its region.

    Only a window next to the anchor is searched (the snippet lines on that side plus
    `MAX_SILENT_DROP`), so a blank line or a brace far away never stretches the region.
    """
    if leftward:
        # searched from the anchor outward (both reversed), so of equal runs the nearest wins
        snippet = wanted[:anchor.b]
        low = max(cursor, anchor.a - len(snippet) - MAX_SILENT_DROP)
        window = keys[low:anchor.a]
        found = difflib.SequenceMatcher(None, window[::-1], snippet[::-1], autojunk=False).get_matching_blocks()
        blocks = [difflib.Match(anchor.a - m.a - m.size, anchor.b - m.b - m.size, m.size) for m in found if m.size]
        blocks.sort()
    else:
        snippet = wanted[anchor.b + anchor.size:]
        low = anchor.a + anchor.size
        window = keys[low:low + len(snippet) + MAX_SILENT_DROP]
        found = difflib.SequenceMatcher(None, window, snippet, autojunk=False).get_matching_blocks()
        blocks = [difflib.Match(low + m.a, anchor.b + anchor.size + m.b, m.size) for m in found if m.size]
    edge, dropped = anchor, 0
    for block in (reversed(blocks) if leftward else blocks):
        left, right = (block, edge) if leftward else (edge, block)
        dropped += max(0, _dropped_between(left, right))
        if dropped > MAX_SILENT_DROP:
            break
        edge = block
    return edge


def _refuse_lookalike(old: str, new: str, part_number: int) -> None:
    """Refuse when a new line at a part's edge looks like the input line just beyond it (same
    indentation, same first word) without being similar enough to count as its rewrite: whether it
    replaces that line or goes beside it, the snippet does not say."""
    if not (old.strip() and new.strip()):
        return
    indent = len(old) - len(old.lstrip()) == len(new) - len(new.lstrip())
    if (indent and old.split()[0] == new.split()[0]) or ratio(old, new) >= LOOKALIKE:
        raise SnippetRefused("look-alike edge line",
            f"part {part_number} of the snippet: does {new.strip()[:40]!r} replace {old.strip()[:40]!r} or go "
            "beside it? show one more unchanged line on that side")


def _refuse_duplicates(keys: list[str], wanted: list[str], start: int, end: int, first: int, stop: int,
                       part_number: int) -> None:
    """Refuse when a snippet line left outside the matched region (so it would be inserted) is a line
    the input has: it is likely context the alignment could not reach, or the region is at the wrong
    place, and a merge would duplicate it."""
    known = set(keys)
    for line in wanted[:first] + wanted[stop:]:
        if distinctive(line) and line in known:
            raise SnippetRefused("unaligned context",
                f"part {part_number} of the snippet: the line {line.strip()[:40]!r} is in the input but could "
                "not be aligned with the rest of the part; add a `... existing code ...` marker where lines are kept")


def _dropped_between(left: difflib.Match, right: difflib.Match) -> int:
    """How many more input lines than snippet lines lie between two matched runs: lines the snippet
    drops there without a marker (at most `MAX_SILENT_DROP` in all on each side of the anchor)."""
    return (right.a - (left.a + left.size)) - (right.b - (left.b + left.size))


def _similar_run(inputs: list[str], snippet: list[str]) -> int:
    """How many leading pairs of (input line, snippet line) are similar enough to be a rewrite."""
    count = 0
    for old, new in zip(inputs, snippet):
        if not old.strip() or ratio(old, new) < REWRITE:
            break
        count += 1
    return count


def apply_update_snippet(source: str, instruction: str) -> str:
    """The input with the instruction's update snippet merged in.

    Rejects (SnippetRefused, the message says why): an instruction without a fenced snippet that
    has a marker line; an empty input; a part with no line matching the input; a part whose context
    matches more than one place; parts out of order; an unmarked edge that would delete more than
    `MAX_EDGE_DROP` lines; a merge that changes nothing.
    """
    lines = find_update_snippet(instruction)
    if lines is None:
        raise SnippetRefused("no snippet", "the instruction has no fenced snippet with `... existing code ...` markers")
    parts = split_parts(lines)
    if not parts:
        raise SnippetRefused("only markers", "the snippet has only markers and blank lines")
    source_lines = split_lines(source)
    if not source_lines:
        raise SnippetRefused("empty input", "the input is empty")
    keys = [line_key(line) for line in source_lines]
    ending = dominant_ending(source_lines)
    output: list[tuple[str, bool]] = []  # (line, taken from the input)
    cursor = 0
    for number, part in enumerate(parts, start=1):
        placement = place_part(keys, cursor, part, number)
        output.extend((line, True) for line in source_lines[cursor:placement.start])
        output.extend(_part_lines(part, source_lines, keys, placement, number))
        cursor = placement.end
    output.extend((line, True) for line in source_lines[cursor:])
    merged = join_lines(output, ending, final_break=ends_with_break(source_lines[-1]))
    if merged == source:
        raise SnippetRefused("no change", "the snippet changes nothing: every line of it is already in the input")
    return merged


def _part_lines(part: Part, source_lines: list[str], keys: list[str], placement: Placement,
                part_number: int) -> list[tuple[str, bool]]:
    """The part's lines: a matched one taken from the input as it is, a new one without an ending."""
    region = keys[placement.start:placement.end]
    wanted = [line.rstrip() for line in part.lines]
    opcodes = difflib.SequenceMatcher(None, region, wanted, autojunk=False).get_opcodes()
    _refuse_moves(keys, placement, wanted, opcodes, part_number)
    out: list[tuple[str, bool]] = []
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            out.extend((line, True) for line in source_lines[placement.start + i1:placement.start + i2])
        elif tag in ("replace", "insert"):
            out.extend((line, False) for line in part.lines[j1:j2])
    return out


def _refuse_moves(keys: list[str], placement: Placement, wanted: list[str],
                  opcodes: Sequence[tuple[str, int, int, int, int]], part_number: int) -> None:
    """Refuse a merge that looks like moved code: it inserts two consecutive lines (with letters or
    digits) that the input already has outside the region, or drops two that the snippet shows
    elsewhere. Then the snippet's context probably sits at the code's old place, not its new one, and
    a merge there would duplicate or delete a block."""
    outside = keys[:placement.start] + [""] + keys[placement.end:]
    input_pairs = set(_pairs(outside))
    snippet_pairs = set(_pairs(wanted))
    region = keys[placement.start:placement.end]
    inserted = [pair for tag, _, _, j1, j2 in opcodes if tag in ("replace", "insert") for pair in _pairs(wanted[j1:j2])]
    dropped = [pair for tag, i1, i2, _, _ in opcodes if tag in ("replace", "delete") for pair in _pairs(region[i1:i2])]
    moved_in = next((pair for pair in inserted if pair in input_pairs), None)
    if moved_in:
        raise SnippetRefused("moved code",
            f"part {part_number} of the snippet adds lines the input already has elsewhere "
            f"({moved_in[0].strip()[:40]!r}); if code moved, show the old place too, with its context")
    moved_out = next((pair for pair in dropped if pair in snippet_pairs), None)
    if moved_out:
        raise SnippetRefused("moved code",
            f"part {part_number} of the snippet would drop lines it also shows "
            f"({moved_out[0].strip()[:40]!r}); add more unchanged lines around the change")


def _pairs(lines: list[str]) -> list[tuple[str, str]]:
    """Consecutive pairs of lines that both have a letter or digit."""
    return [(a, b) for a, b in zip(lines, lines[1:]) if distinctive(a) and distinctive(b)]
