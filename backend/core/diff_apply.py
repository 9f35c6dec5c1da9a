"""A unified diff carried by an instruction, applied as `patch` applies it with no fuzz.

    Apply this diff:
    ```diff
    @@ -9,3 +9,3 @@
         def area(self):
    -        return self.width * self.height
    +        return self.width * self.height * 2
    ```

Each hunk's old side (its context and `-` lines) must occur in the input, at or after the end of
the hunk before it; where it occurs more than once, the place nearest the line its `@@` header
names is taken, and a tie is refused. Context lines are taken from the input byte for byte, `+`
lines get the input's line ending; lines compare without trailing spaces (as in the snippet
aligner). File headers (`---`, `+++`, `diff`, `index`) are skipped; a blank line inside a hunk is
read as a blank context line (editors and chat tools often strip its leading space). Refusals are
`SnippetRefused` with the kinds "no diff", "hunk not found", "ambiguous", "malformed diff" and "no
change", so callers treat both aligners alike. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from backend.core.lines import split_lines
from backend.core.edit_text import SnippetRefused, dominant_ending, ends_with_break, join_lines
from backend.core.snippet_apply import first_fenced_block, line_key

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
FILE_HEADER = re.compile(r"^(?:--- |\+\+\+ |diff |index |new file mode|deleted file mode|similarity index|rename )")


@dataclass(frozen=True)
class Hunk:
    old_start: int                      # the old side's first line number in its header (1-based)
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text without the marker)

    @property
    def old(self) -> list[str]:
        return [text.rstrip() for tag, text in self.lines if tag != "+"]


def find_unified_diff(instruction: str) -> list[str] | None:
    """The lines of the first fenced block that holds a hunk header (`@@ -a,b +c,d @@`), or None."""
    return first_fenced_block(instruction, HUNK_HEADER)


def parse_hunks(lines: list[str]) -> list[Hunk]:
    """The hunks of a unified diff's lines; SnippetRefused("malformed diff") for a line that is
    neither a file header, a hunk header, a context, a `-` or a `+` line."""
    hunks: list[Hunk] = []
    start: int | None = None
    body: list[tuple[str, str]] = []
    for number, line in enumerate(lines, start=1):
        header = HUNK_HEADER.match(line)
        if header:
            if start is not None:
                hunks.append(Hunk(start, tuple(body)))
            start, body = int(header.group(1)), []
        elif start is None or line.startswith("\\"):  # before the first hunk; "\ No newline at end of file"
            continue
        elif line[:1] in (" ", "-", "+"):
            body.append((line[0], line[1:]))
        elif line == "":
            body.append((" ", ""))
        elif FILE_HEADER.match(line):
            continue
        else:
            raise SnippetRefused("malformed diff", f"line {number} of the diff is not a context, `-` or `+` line: {line[:40]!r}")
    if start is not None:
        hunks.append(Hunk(start, tuple(body)))
    return [hunk for hunk in hunks if hunk.lines]


def apply_unified_diff(source: str, instruction: str) -> str:
    """The input with the instruction's unified diff applied.

    Rejects (SnippetRefused): no fenced diff ("no diff"), a malformed line, a hunk whose old side is
    not in the rest of the input ("hunk not found"), one that fits two places equally near its
    header ("ambiguous"), a diff that changes nothing ("no change").
    """
    lines = find_unified_diff(instruction)
    if lines is None:
        raise SnippetRefused("no diff", "the instruction has no fenced unified diff (no `@@ -a,b +c,d @@` line)")
    hunks = parse_hunks(lines)
    if not hunks:
        raise SnippetRefused("malformed diff", "the diff has hunk headers but no lines")
    source_lines = split_lines(source)
    keys = [line_key(line) for line in source_lines]
    output: list[tuple[str, bool]] = []
    cursor = 0
    for number, hunk in enumerate(hunks, start=1):
        place = _place(keys, cursor, hunk, number)
        output.extend((line, True) for line in source_lines[cursor:place])
        old_index = place
        for tag, text in hunk.lines:
            if tag == " ":
                output.append((source_lines[old_index], True))
            elif tag == "+":
                output.append((text, False))
            if tag != "+":
                old_index += 1
        cursor = old_index
    output.extend((line, True) for line in source_lines[cursor:])
    final_break = not source_lines or ends_with_break(source_lines[-1])
    merged = join_lines(output, dominant_ending(source_lines), final_break=final_break)
    if merged == source:
        raise SnippetRefused("no change", "the diff changes nothing")
    return merged


def _place(keys: list[str], cursor: int, hunk: Hunk, number: int) -> int:
    """Where the hunk's old side starts in the input (0-based), at or after `cursor`."""
    old = hunk.old
    wanted = max(cursor, hunk.old_start - 1 if old else hunk.old_start)  # a pure insertion goes after its line
    if not old:
        if wanted > len(keys):
            raise SnippetRefused("hunk not found", f"hunk {number} inserts after line {hunk.old_start}, past the input's end")
        return wanted
    places = [i for i in range(cursor, len(keys) - len(old) + 1) if keys[i:i + len(old)] == old]
    if not places:
        first = next((line for line in old if line.strip()), "")
        raise SnippetRefused(
            "hunk not found",
            f"hunk {number} of the diff does not match the input (its old side starting {first.strip()[:40]!r} is not "
            "there, or not after the hunk before it); was the diff made against another version?")
    places.sort(key=lambda i: abs(i - wanted))
    if len(places) > 1 and abs(places[0] - wanted) == abs(places[1] - wanted):
        raise SnippetRefused("ambiguous", f"hunk {number} of the diff fits lines {places[0] + 1} and {places[1] + 1} equally")
    return places[0]
