"""One-token repairs of a line: the texts "Fix the bug on line 7" may give that line.

The shipped model, told which line holds the bug, rewrites that line (the shape guard sees to it)
but seldom with the right text: 1 of 15 held-out "fix the bug on line N" edits exact
(docs/results.md). Most small bugs are one token off: a wrong operator (`<` for `<=`, `+` for
`-`, `and` for `or`), an off-by-one number, a wrong variable, a dropped or extra `not`. So the
line's possible fixes are listed here, and the decoder holds the model's gen to one of them; the
model chooses which (backend/runtime/shape_guard.py). A bug word in the instruction narrows the
list ("There is a wrong operator on line 7": operators only).

A line is lexed on its own (strings and comments are never touched); the wrong-variable repairs
use the names the rest of the input uses at least twice. Python and JavaScript. Standard library
only.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Iterable, Sequence

OPERATOR, NUMBER, VARIABLE, CONDITION = "operator", "number", "variable", "condition"
KINDS = (OPERATOR, NUMBER, VARIABLE, CONDITION)

# The words of an instruction that name a kind of bug ("wrong operator", "off-by-one error").
KIND_WORDS = {"operator": OPERATOR, "off": NUMBER, "variable": VARIABLE, "condition": CONDITION}

# Operators and words a bug swaps, each with what it may have been instead.
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_SWAPS: dict[str, tuple[str, ...]] = {
    **{op: tuple(o for o in _COMPARISONS if o != op) for op in _COMPARISONS},
    "===": ("!==",), "!==": ("===",), "+": ("-",), "-": ("+",), "*": ("/",), "/": ("*",),
    "+=": ("-=",), "-=": ("+=",), "and": ("or",), "or": ("and",), "&&": ("||",), "||": ("&&",),
    "True": ("False",), "False": ("True",), "true": ("false",), "false": ("true",),
}
_NEGATABLE_AFTER = re.compile(r"\b(?:if|elif|while|return|and|or)\s+(?!not\b)")  # where `not ` may go
_JS_NEGATABLE_AFTER = re.compile(r"(?:\bif\s*\(|\bwhile\s*\(|\breturn\s+|&&\s*|\|\|\s*)(?=[\w$(])")

_TOKEN_TAIL = r"""
    |(?P<string>'(?:\\.|[^\\'])*'?|"(?:\\.|[^\\"])*"?|`(?:\\.|[^\\`])*`?)
    |(?P<number>\d+(?:\.\d+)?)
    |(?P<name>[A-Za-z_$][\w$]*)
    |(?P<op>===|!==|==|!=|<=|>=|\+=|-=|&&|\|\||\*\*|//|->|=>|[-+*/<>=!.(),:;\[\]{}%&|^~?@])
    |(?P<other>\s+|.)"""
# A comment starts with '#' in Python and '//' in JavaScript (where '//' is Python's floor division).
_PYTHON_TOKEN = re.compile(r"(?P<comment>\#.*)" + _TOKEN_TAIL, re.VERBOSE)
_JS_TOKEN = re.compile(r"(?P<comment>//.*|/\*.*?\*/)" + _TOKEN_TAIL, re.VERBOSE)
_JS_WORDS = frozenset(
    "break case catch class const continue default delete do else export extends false finally for function "
    "if import in instanceof let new null return super switch this throw true try typeof undefined var void "
    "while yield async await of".split()
)
_RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | _JS_WORDS | {"self", "cls"}


def line_tokens(line: str, *, javascript: bool = False) -> list[tuple[str, str, int]]:
    """(kind, text, column) of each token of one line: comment, string, number, name, op, other."""
    pattern = _JS_TOKEN if javascript else _PYTHON_TOKEN
    return [(m.lastgroup or "other", m.group(), m.start()) for m in pattern.finditer(line)]


def variable_names(lines: Iterable[str], *, javascript: bool = False) -> list[str]:
    """Names the input uses at least twice, never as an attribute (`x.name`): the wrong-variable
    repairs' choices, sorted."""
    counts: dict[str, int] = {}
    attributes: set[str] = set()
    for line in lines:
        previous = ""
        for kind, text, _ in line_tokens(line, javascript=javascript):
            if kind == "name" and text not in _RESERVED:
                counts[text] = counts.get(text, 0) + 1
                if previous == ".":
                    attributes.add(text)
            if kind != "other":
                previous = text
    return sorted(name for name, count in counts.items() if count >= 2 and name not in attributes)


def repair_options(line: str, names: Sequence[str], kinds: Iterable[str] = KINDS, *, javascript: bool = False) -> list[str]:
    """`line` (with its ending) with one token repaired, each distinct text once, in the order of
    `KINDS` (operators first); never `line` itself. `javascript`: a condition is negated with `!`,
    not `not `."""
    wanted = set(kinds)
    tokens = line_tokens(line, javascript=javascript)
    found: dict[str, None] = {}

    def put(start: int, end: int, new: str) -> None:
        text = line[:start] + new + line[end:]
        if text != line:
            found.setdefault(text)

    for kind in KINDS:
        if kind not in wanted:
            continue
        for index, (token_kind, text, column) in enumerate(tokens):
            end = column + len(text)
            if kind == OPERATOR and token_kind in ("op", "name") and text in _SWAPS:
                for new in _SWAPS[text]:
                    put(column, end, new)
            elif kind == NUMBER and token_kind == "number" and text.isdigit():
                put(column, end, str(int(text) + 1))
                if int(text) > 0:
                    put(column, end, str(int(text) - 1))
            elif kind == VARIABLE and token_kind == "name" and text in names and _previous(tokens, index) != ".":
                for other in names:
                    put(column, end, other)
            elif kind == CONDITION and token_kind in ("name", "op") and text in ("not", "!"):
                put(column, _skip_spaces(line, end), "")
        if kind == CONDITION:
            _negations(line, tokens, put, javascript)
    return list(found)


def looks_like_javascript(lines: Iterable[str]) -> bool:
    """Whether more of the input's lines end as JavaScript statements do (`;`, `{`, `}`) than as
    Python blocks open (`:`)."""
    ends = [line.rstrip()[-1:] for line in lines if line.strip()]
    return sum(end in ";{}" for end in ends) > sum(end == ":" for end in ends)


def requested_kinds(words: Iterable[str]) -> tuple[str, ...]:
    """The kinds of bug an instruction's `words` name (lower case), or all of them when none."""
    named = tuple(dict.fromkeys(KIND_WORDS[w] for w in words if w in KIND_WORDS))
    return named or KINDS


def _negations(line: str, tokens: list[tuple[str, str, int]], put: Callable[[int, int, str], None], javascript: bool) -> None:
    """`not ` (Python) or `!` (JavaScript) put before a condition, outside strings and comments."""
    code_end = next((column for kind, _, column in tokens if kind == "comment"), len(line))
    quoted = [(column, column + len(text)) for kind, text, column in tokens if kind == "string"]
    pattern, negation = (_JS_NEGATABLE_AFTER, "!") if javascript else (_NEGATABLE_AFTER, "not ")
    for match in pattern.finditer(line[:code_end]):
        point = match.end()
        if not any(start <= point < end for start, end in quoted):
            put(point, point, negation)


def _previous(tokens: list[tuple[str, str, int]], index: int) -> str:
    return next((text for kind, text, _ in reversed(tokens[:index]) if kind != "other"), "")


def _skip_spaces(line: str, end: int) -> int:
    while end < len(line) and line[end] == " ":
        end += 1
    return end
