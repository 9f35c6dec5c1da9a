"""Where the words of an instruction occur in its input: a hint for the model's line numbers.

A copy-as-decode program names lines by number. To edit "every use of `stmt`" the model has to
find the lines holding `stmt` and then read the numbers printed before them: two hops through the
prompt, which the 135M model mostly gets wrong (docs/results.md: rename 0/22, "Delete the statement
..." placed on the wrong line). The "located" prompt style adds one line after the instruction
that does the first hop for it, e.g. ``Lines with `stmt`: 48, 50, 51, 53, 57``.

Terms are what an instruction names: a span in backticks or quotes, or a bare word that looks like
code (has `_`, a digit, an inner capital) or is not a common English word. A term is listed only
when it occurs in the input on 1..MAX_LINES lines (as a whole word for a bare identifier, as text
otherwise); a term found everywhere locates nothing. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from backend.core.lines import strip_line_ending

MAX_TERMS = 4
# Terms tried at the most: each is searched through every input line, and an instruction may be
# 20,000 characters (a pasted block outside a fence); training instructions never need more.
MAX_CANDIDATES = 32
MAX_LINES = 24
MIN_TERM_CHARS = 2

_FENCED = re.compile(r"```.*?(```|$)", re.S)
_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]+)\"|'([^'\n]+)'")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CODE_LIKE = re.compile(r"_|\d|[a-z][A-Z]")
# Words of instructions and of everyday English that locate nothing in code.
_COMMON = frozenset("""
a about above add after all also an and any are as at be before below block body both but by call
calls can change changes class code comment constant default delete do docstring does each edit else
end entirely every everywhere file first fix for from function here if import in insert instead into
is it its just last line lines make method more name named new next no not of on one only or other
out place put rather remove rename replace rest same set so start starting statement than that the
their them then there these this throughout to two under up update use used uses value variable
where which while with without would you your
""".split())


def instruction_terms(instruction: str) -> list[str]:
    """The terms `instruction` names, in order of appearance, without repeats: quoted or
    backticked spans, then code-like or uncommon bare words outside them. A fenced block (an
    update snippet) is skipped: it places itself by its own lines (snippet_apply.py)."""
    terms: list[str] = []
    text = _FENCED.sub(" ", instruction)
    rest = text
    for match in _QUOTED.finditer(text):
        terms.append(next(group for group in match.groups() if group is not None).strip())
        rest = rest.replace(match.group(0), " ")
    for word in _WORD.findall(rest):
        if _CODE_LIKE.search(word) or word.lower() not in _COMMON:
            terms.append(word)
    # dict.fromkeys drops repeats and keeps first-appearance order.
    return list(dict.fromkeys(t for t in terms if len(t) >= MIN_TERM_CHARS))


def term_lines(term: str, lines: Sequence[str]) -> list[int]:
    """The 1-based numbers of the lines of `lines` that hold `term`: as a whole word when the term
    is one identifier, as text otherwise."""
    if _WORD.fullmatch(term):
        pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(term)}(?![A-Za-z0-9_])")
        return [n for n, line in enumerate(lines, start=1) if pattern.search(line)]
    return [n for n, line in enumerate(lines, start=1) if term in line]


def locate(instruction: str, lines: Sequence[str]) -> list[tuple[str, list[int]]]:
    """Up to MAX_TERMS (term, line numbers) pairs for the terms of `instruction` found in `lines`
    on 1..MAX_LINES lines. Line endings are ignored."""
    bare = [strip_line_ending(line) for line in lines]
    found: list[tuple[str, list[int]]] = []
    for term in instruction_terms(instruction)[:MAX_CANDIDATES]:
        numbers = term_lines(term, bare)
        if 1 <= len(numbers) <= MAX_LINES:
            found.append((term, numbers))
        if len(found) == MAX_TERMS:
            break
    return found


def location_hint(instruction: str, lines: Sequence[str]) -> str:
    """The prompt's hint: one ``Lines with `term`: 3, 7`` row per located term ("" when none)."""
    return "".join(f"Lines with `{term}`: {', '.join(map(str, numbers))}\n"
                   for term, numbers in locate(instruction, lines))


# A rename the instruction asks for, in the wordings people use for it ("Rename a to b",
# "rename the variable `a` -> `b` everywhere", "Change the name a to b", "Use the name b instead of
# a"). Names may be in backticks or quotes; the old name must be one identifier (a rename of text
# is a replace, not a rename).
_NAME = r"[`'\"]?([A-Za-z_$][A-Za-z0-9_$]*)[`'\"]?(?![A-Za-z0-9_$]|\.\w)"  # a whole name, not a file's
_KIND = r"(?:(?:variable|function|method|class|parameter|argument|attribute|field|constant|identifier|name|symbol)\s+)?"
_RENAMES = (
    (re.compile(rf"\brename\s+(?:the\s+)?{_KIND}{_NAME}\s*(?:to|->|=>|→|as|into)\s*{_NAME}", re.I), 1, 2),
    (re.compile(rf"\bchange\s+the\s+name\s+(?:of\s+)?{_KIND}{_NAME}\s+to\s+{_NAME}", re.I), 1, 2),
    (re.compile(rf"\buse\s+the\s+name\s+{_NAME}\s+instead\s+of\s+{_KIND}{_NAME}", re.I), 2, 1),
)


# Words that may stand around a rename without asking for anything more ("Please rename a to b
# everywhere in this file."). Anything else ("... and delete line 5") makes it more than a rename.
_RENAME_FILLER = frozenset("""
please rename the a an every everywhere throughout all its uses use occurrences occurrence of in
this that file code module function class snippet globally consistently here below above it
""".split())


def requested_rename(instruction: str) -> tuple[str, str] | None:
    """(old, new) when `instruction` asks for an identifier to be renamed and for nothing else,
    else None. An instruction with a fenced block (an update snippet) is never a rename."""
    if _FENCED.search(instruction):
        return None
    for pattern, old_group, new_group in _RENAMES:
        match = pattern.search(instruction)
        if not match or match.group(old_group) == match.group(new_group):
            continue
        rest = instruction[: match.start()] + " " + instruction[match.end():]
        if all(word.lower() in _RENAME_FILLER for word in _WORD.findall(rest)) and not re.search(r"\d", rest):
            return match.group(old_group), match.group(new_group)
    return None


def rename_lines(instruction: str, lines: Sequence[str]) -> list[int]:
    """The 1-based numbers of the input lines that hold the name `instruction` asks to rename (as a
    whole word); [] when it asks for no rename. A rename must rewrite each of them, so no copy may
    take one as it is (backend/runtime/shape_guard.py)."""
    rename = requested_rename(instruction)
    if rename is None:
        return []
    return term_lines(rename[0], [strip_line_ending(line) for line in lines])
