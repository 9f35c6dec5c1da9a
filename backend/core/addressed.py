"""Instructions that say where their edit goes, read into the program's shape (line_shape.py).

"Delete lines 4-6", "Remove line 27 (`return x`)", "Delete the statement `return x`", "Add `pass`
after line 9", "Put `# note` on a new line just before line 3", "Insert `import os` at the top",
"Change 1 to 2 on line 12", "Line 5 should read `x = 1`", "Fix the bug on line 7", "Rename a to b",
and several of them at once ("1. ... 2. ...", one per line, or "... Then ..."). Each names lines of
the input and what happens to them: dropped, rewritten by one gen line each, or new lines inserted
at a point. Where that is certain, the decoder keeps the model's program in that shape
(backend/runtime/shape_guard.py) and the model writes only the new text.

Some instructions also fix that text, up to a choice the model makes (`LineText`): a quoted line
("Add `pass` after line 9", "Replace line 4 with `x = 2`") is written at one of the input's
indentations; a literal change ("Change 1 to 2 on line 12") is the named line with one occurrence
of the value changed; a rename's lines are those lines with some of the name's occurrences renamed
(all first; one inside a string may be meant to stay). "Fix the bug on line 7" is the line with one
token repaired (backend/core/repairs.py: an operator, a number off by one, a variable, a `not`),
narrowed by a bug word ("wrong operator"); which repair is the model's choice.

Reading is conservative: every clause must be one of these edits and say nothing else. Quoted code
is set aside first; the words left must all be words such edits use (`_WORDS`), a line reference
must name input lines, a quoted line must be the line it names ("Delete line 5: `x = 1`" where line
5 is not `x = 1` reads as nothing), and two clauses may not do different things to one line.
Anything else ("Delete line 5 and tidy up", "Fix the bug", an update snippet) gives None: the
model's program is left as it chooses. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from backend.core.definitions import definition_line, definition_lines, docstring_point
from backend.core.line_shape import INSERT, REWRITE, LineShape, LineText
from backend.core.lines import strip_line_ending
from backend.core.locate import requested_rename, term_lines
from backend.core.repairs import looks_like_javascript, repair_options, requested_kinds, variable_names

_FENCED = re.compile(r"```")
_QUOTED = re.compile(r"`[^`\n]+`|\"[^\"\n]+\"|'[^'\n]+'")
_LINE_REF = re.compile(r"\blines?\s+(\d+)(?:\s*(?:-|–|to|through|thru)\s*(\d+))?", re.I)
_HEADER = re.compile(r"^\s*(?:please\s+)?make\s+(?:these|the\s+following)\s+(?:changes|edits)\s*:\s*$", re.I)
_NUMBERING = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")
_THEN = re.compile(r"(?:(?<=[.;,])\s*|\s+and\s+)then\s+", re.I)  # the clause keeps its full stop
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Words an addressed edit may use besides its code and line numbers.
_WORDS = frozenset("""
please delete remove drop erase the a an line lines statement block starting start starts at of that
add insert put new just right immediately directly above before after below on comment import
top very first file beginning with as and here
change replace set use rewrite read should be to with rather than instead value in it make
fix bug there is has error wrong operator variable condition off by one
""".split())
_DROP = frozenset("delete remove drop erase".split())
_INSERT = frozenset("add insert put".split())
_BEFORE = frozenset("above before".split())
_AFTER = frozenset("after below".split())
# A literal change names the old and the new value, bare or quoted: "Change 1 to 2 on line 12",
# "In line 8 use True rather than False". Read on the clause without its line reference; bare
# values are taken out before the word check. (pattern, group of the old value, of the new one)
_VALUE = r"(\"[^\"\n]*\"|'[^'\n]*'|`[^`\n]*`|\S+?)"
_LITERALS = tuple((re.compile(p, re.I), old, new) for p, old, new in (
    (rf"\bchange\s+{_VALUE}\s+to\s+{_VALUE}(?=\s+on\b|\s*[.,]?\s*$)", 1, 2),
    (rf"\buse\s+{_VALUE}\s+rather\s+than\s+{_VALUE}\s*\.?$", 2, 1),
    (rf"\breplace\s+the\s+value\s+{_VALUE}\s+with\s+{_VALUE}\s*\.?$", 1, 2),
    (rf"\bset\s+{_VALUE}\s+on\b.*\bto\s+{_VALUE}(?=\s+instead|\s*\.?$)", 1, 2),
))


# A definition named by the instruction: deleted ("Delete the function load", "Remove `load`
# entirely") or given a docstring ("Add a docstring to load: Read it.", "Document load with the
# docstring "Read it."", "Give `load` the doc comment: Read it.", "Add the JSDoc comment /** Read
# it. */ above load."). (pattern, group of the name, group of the docstring or 0)
_NAMED = r"`?([A-Za-z_$][\w$]*)`?"
_NAMED_EDITS = tuple((re.compile(p, re.I), name, doc) for p, name, doc in (
    (rf"^(?:delete|remove)\s+the\s+(?:function|method|class)\s+{_NAMED}\.?$", 1, 0),
    (rf"^remove\s+{_NAMED}\s+entirely\.?$", 1, 0),
    (rf"^add\s+a\s+docstring\s+to\s+{_NAMED}\s*:\s*(.+)$", 1, 2),
    (rf"^document\s+{_NAMED}\s+with\s+the\s+docstring\s+\"([^\"]+)\"\.?$", 1, 2),
    (rf"^give\s+{_NAMED}\s+the\s+doc\s+comment\s*:\s*(.+)$", 1, 2),
    (rf"^document\s+the\s+function\s+{_NAMED}\s*:\s*(.+)$", 1, 2),
    (rf"^add\s+the\s+jsdoc\s+comment\s+/\*\*\s*(.+?)\s*\*/\s+above\s+{_NAMED}\.?$", 2, 1),
))


@dataclass
class Places:
    """What the clauses read so far do to the input's lines."""

    rewrite: set[int] = field(default_factory=set)
    drop: set[int] = field(default_factory=set)
    insert_after: set[int] = field(default_factory=set)
    texts: dict[tuple[str, int], list[LineText]] = field(default_factory=dict)
    last_ending: str = "\n"  # the input's last line's ending ("" without one): a rewrite of it keeps that
    indents: tuple[str, ...] = ("",)  # the input's indentations, most used first

    def quoted_line(self, code: str, near: Sequence[str], *, only_near: bool = False) -> list[LineText]:
        """A quoted line, `code`, at the indentation it is quoted with, if any; else at one of the
        input's indentations, those of the nearest non-blank lines `near` the place first (only
        those with `only_near`: a replaced line keeps its own)."""
        if code[:1] in (" ", "\t"):
            return [LineText(code.rstrip() + "\n")]
        preferred = [_indent_of(line) for line in near if line.strip()]
        indents = preferred if only_near and preferred else preferred + list(self.indents)
        return [LineText(code.strip() + "\n", tuple(dict.fromkeys(indents)))]

    def quote(self, slot: tuple[str, int], options: list[LineText]) -> bool:
        """Fix what the gen at `slot` writes; False when another clause fixed something else."""
        if self.texts.get(slot, options) != options:
            return False
        if options:
            self.texts[slot] = options
        return True


def requested_shape(instruction: str | None, lines: Sequence[str]) -> LineShape | None:
    """The shape `instruction` fixes for a program over `lines` (each with or without its ending),
    or None when it does not fix one (see the module docstring)."""
    if not instruction or not lines or _FENCED.search(instruction):
        return None
    bare = [strip_line_ending(line) for line in lines]
    places = Places(last_ending="" if strip_line_ending(lines[-1]) == lines[-1] else "\n", indents=indentations(bare))
    clauses = split_clauses(instruction)
    if not clauses or not all(read_clause(clause, bare, places) for clause in clauses):
        return None
    if places.rewrite & places.drop:
        return None
    return LineShape.build(len(bare), places.rewrite, places.drop, places.insert_after, places.texts)


def line_references(instruction: str) -> list[tuple[int, int]]:
    """The (first, last) input lines `instruction` names by number ("line 4", "lines 4-6"), outside
    quoted code."""
    masked = _QUOTED.sub(" Q ", instruction)
    return [(int(a), int(b) if b else int(a)) for a, b in _LINE_REF.findall(masked)]


def shift_line_references(instruction: str, offset: int) -> str:
    """`instruction` with every line it names by number (outside quoted code) moved `offset` lines
    down: what it says of a window that starts after `offset` input lines."""
    def shifted(match: re.Match[str]) -> str:
        return re.sub(r"\d+", lambda number: str(int(number.group(0)) - offset), match.group(0))

    parts, last = [], 0
    for quote in _QUOTED.finditer(instruction):
        parts += [_LINE_REF.sub(shifted, instruction[last: quote.start()]), quote.group(0)]
        last = quote.end()
    return "".join(parts) + _LINE_REF.sub(shifted, instruction[last:])


def split_clauses(instruction: str) -> list[str]:
    """The separate edits an instruction asks for: one per line (a numbered list's header and
    numbers dropped), and within a line one per "Then"."""
    clauses = []
    for row in instruction.strip().splitlines():
        if not row.strip() or _HEADER.match(row):
            continue
        clauses += [part.strip() for part in _THEN.split(_NUMBERING.sub("", row)) if part.strip()]
    return clauses


def read_clause(clause: str, lines: Sequence[str], places: Places) -> bool:
    """Add what `clause` does to `places`; False when it is not an addressed edit of `lines`."""
    rename = requested_rename(clause)
    if rename is not None:
        held = term_lines(rename[0], lines)
        places.rewrite.update(held)
        endings = [places.last_ending if number == len(lines) else "\n" for number in held]
        return bool(held) and all(places.quote((REWRITE, number), rename_options(lines[number - 1] + ending, *rename))
                                  for number, ending in zip(held, endings))
    named = next(((match, name, doc) for pattern, name, doc in _NAMED_EDITS
                  for match in [pattern.match(clause.strip())] if match), None)
    if named is not None:
        return read_named(named[0].group(named[1]), named[0].group(named[2]) if named[2] else None, lines, places)
    quoted = [q[1:-1] for q in _QUOTED.findall(clause)]
    masked = _QUOTED.sub(" Q ", clause)
    refs = [(int(a), int(b) if b else int(a)) for a, b in _LINE_REF.findall(masked)]
    plain = _LINE_REF.sub(" ", masked)
    words = {w.lower() for w in _WORD.findall(plain)} - {"Q", "q"}
    if words & _DROP:
        return read_drop(words, refs, quoted, lines, places)
    if words & _INSERT or "start" in words:
        return read_insert(words, refs, quoted, lines, places)
    return read_rewrite(_LINE_REF.sub(" ", clause), plain, words, refs, quoted, lines, places)


def read_named(name: str, doc: str | None, lines: Sequence[str], places: Places) -> bool:
    """The definition of `name` dropped (`doc` None: decorators through body), or the docstring
    `doc` inserted for it (Python: `\"\"\"doc\"\"\"` after the signature, at the body's
    indentation; JS: `/** doc */` above it)."""
    header = definition_line(lines, name)
    if header is None:
        return False
    if doc is None:
        extent = definition_lines(lines, header)
        places.drop.update(range(extent[0], extent[1] + 1) if extent else [])
        return extent is not None
    point = docstring_point(lines, header)
    if point is None:
        return False
    after, indentation, form = point
    text = f'"""{doc.strip()}"""\n' if form == "python" else f"/** {doc.strip()} */\n"
    places.insert_after.add(after)
    return places.quote((INSERT, after), [LineText(text, (indentation,))])


def read_drop(words: set[str], refs: list[tuple[int, int]], quoted: list[str], lines: Sequence[str],
              places: Places) -> bool:
    """"Delete lines 4-6", "Remove line 27 (`code`)", "Remove the block starting at line 3",
    "Delete the statement `code`" (the one line that is that code)."""
    if not words <= _WORDS or words & (_INSERT | _BEFORE | _AFTER) or len(refs) > 1 or len(quoted) > 1:
        return False
    if not refs:
        found = [n for n, line in enumerate(lines, 1) if quoted and line.strip() == quoted[0].strip()]
        places.drop.update(found)
        return len(found) == 1 and bool(words & {"statement", "line"})
    first, last = refs[0]
    if not 1 <= first <= last <= len(lines) or (quoted and quoted[0].strip() not in lines[first - 1]):
        return False
    if "block" in words:
        if first != last:
            return False
        last = block_end(lines, first)
    places.drop.update(range(first, last + 1))
    return True


def read_insert(words: set[str], refs: list[tuple[int, int]], quoted: list[str], lines: Sequence[str],
                places: Places) -> bool:
    """"Add `x` after line 9", "Put `# note` on a new line just before line 3", "Insert `import os`
    at the top" / "as the first line", "Start the file with `x`": new text (quoted) at one point."""
    if not words <= _WORDS or len(quoted) != 1 or words & _DROP:
        return False
    before, after = bool(words & _BEFORE), bool(words & _AFTER)
    if not refs:
        at_top = bool(words & {"top", "first", "beginning", "start"}) and not (before or after)
        places.insert_after.update([0] if at_top else [])
        return at_top and places.quote((INSERT, 0), places.quoted_line(quoted[0], lines[:1]))
    first, last = refs[0]
    if len(refs) != 1 or first != last or before == after or not 1 <= first <= len(lines):
        return False
    point = first - 1 if before else first
    places.insert_after.add(point)
    below = next((line for line in lines[point:] if line.strip()), "")
    above = next((line for line in reversed(lines[:point]) if line.strip()), "")
    return places.quote((INSERT, point), places.quoted_line(quoted[0], [below, above]))


def read_rewrite(unlined: str, plain: str, words: set[str], refs: list[tuple[int, int]], quoted: list[str],
                 lines: Sequence[str], places: Places) -> bool:
    """One line rewritten: "Replace line 4 with `x`", "Line 5 should read `x`" (that line, any
    indentation), "Change 1 to 2 on line 12", "Set 'g' on line 19 to 'h' instead" (the line with
    that one change), "Fix the bug on line 7" (any text). `unlined`: the clause without its line
    reference, quotes kept; `plain`: the same with quoted code masked."""
    if len(refs) != 1 or refs[0][0] != refs[0][1] or not 1 <= refs[0][0] <= len(lines):
        return False
    number = refs[0][0]
    values: set[str] = set()
    options: list[LineText] = []
    found = ((pattern.search(unlined), old, new) for pattern, old, new in _LITERALS)
    literal, old, new = next((entry for entry in found if entry[0] is not None), (None, 0, 0))
    ending = places.last_ending if number == len(lines) else "\n"
    if literal is not None:
        values = {w.lower() for group in literal.groups() for w in _WORD.findall(group) if not _QUOTED.fullmatch(group)}
        options = literal_options(lines[number - 1] + ending, literal.group(old), literal.group(new))
    elif len(quoted) == 1:
        options = places.quoted_line(quoted[0], lines[number - 1:number], only_near=True)
    elif words & {"fix", "bug"} and words <= _WORDS:  # a clause the check below refuses needs no repairs
        options = bug_fix_options(lines, number, ending, words)
    if not (words - values) <= _WORDS or not words & {"change", "replace", "set", "use", "rewrite", "read", "fix", "bug"}:
        return False
    places.rewrite.add(number)
    return places.quote((REWRITE, number), options)


def bug_fix_options(lines: Sequence[str], number: int, ending: str, words: set[str]) -> list[LineText]:
    """Line `number` with one token repaired (backend/core/repairs.py), of the kinds of bug the
    instruction's `words` name ("wrong operator"), else of every kind; [] when it has no token a
    repair changes (then the model writes the line freely)."""
    javascript = looks_like_javascript(lines)
    repaired = repair_options(lines[number - 1] + ending, variable_names(lines, javascript=javascript),
                              requested_kinds(words), javascript=javascript)
    return [LineText(text) for text in repaired]


# A line holding the old name this many times or more is offered only with all of them renamed or
# none (2**k choices otherwise).
MAX_RENAMED_CHOICES = 4


def rename_options(line: str, old: str, new: str) -> list[LineText]:
    """`line` (with its ending) with the name `old` (a whole word) renamed to `new`: everywhere
    first, then at each other choice of its occurrences, then nowhere (a name inside a string or
    a comment may be meant to stay; the model picks)."""
    spans = [m.span() for m in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])", line)]
    count = len(spans)
    masks = range(2 ** count - 1, -1, -1) if count < MAX_RENAMED_CHOICES else (2 ** count - 1, 0)
    options = []
    for mask in sorted(masks, key=lambda m: -bin(m).count("1")):
        text, last = "", 0
        for index, (start, end) in enumerate(spans):
            text += line[last:start] + (new if mask >> index & 1 else old)
            last = end
        options.append(LineText(text + line[last:]))
    return options


def literal_options(line: str, old: str, new: str) -> list[LineText]:
    """`line` (with its ending) with one occurrence of the value `old` changed to `new`, one option per occurrence
    (a bare value as a whole token: `1` is not the 1 of `10` or `v1`); [] when `old` is not there.
    Backticks around a value are not part of it; quote marks are, unless the line lacks them."""
    old, new = old.strip("`"), new.strip("`")
    if old not in line and old[:1] == old[-1:] and old[:1] in "\"'":
        old, new = old[1:-1], new[1:-1] if new[:1] == new[-1:] and new[:1] in "\"'" else new
    if not old:
        return []
    ending = "\n" if line.endswith(("\n", "\r")) else ""
    body = line.rstrip("\r\n")
    bounded = _QUOTED.fullmatch(old) is None and re.fullmatch(r"[\w.]+", old) is not None
    pattern = rf"(?<![\w.]){re.escape(old)}(?![\w]|\.\d)" if bounded else re.escape(old)
    return [LineText(body[: m.start()] + new + body[m.end():] + ending) for m in re.finditer(pattern, body)]


def block_end(lines: Sequence[str], header: int) -> int:
    """The last line of the block line `header` opens: up to its matching brace when it ends with
    `{` (braces counted as characters), else the lines after it indented deeper (blank lines inside
    count, trailing ones do not) and a closing bracket line at its own indent."""
    if lines[header - 1].rstrip().endswith("{"):
        depth = 0
        for number in range(header, len(lines) + 1):
            depth += lines[number - 1].count("{") - lines[number - 1].count("}")
            if depth <= 0:
                return number
    width = _indent(lines[header - 1])
    end = header
    for number in range(header + 1, len(lines) + 1):
        text = lines[number - 1]
        if not text.strip():
            continue
        if _indent(text) > width:
            end = number
            continue
        if _indent(text) == width and text.strip()[0] in "})]":
            end = number
        break
    return end


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))] if line.strip() else ""


def indentations(lines: Sequence[str]) -> tuple[str, ...]:
    """The indentations of the non-blank `lines`, most used first, and no indentation."""
    counts: dict[str, int] = {}
    for line in lines:
        if line.strip():
            counts[_indent_of(line)] = counts.get(_indent_of(line), 0) + 1
    return tuple(dict.fromkeys(sorted(counts, key=lambda indent: -counts[indent]) + [""]))
