"""Injected bugs: a one-line mutation of the code (operator swap, off-by-one, wrong variable,
inverted condition); the `fix_bug` task is to undo it. `replace_line` and `snippet` reuse the mutation
as a plausible new line. Standard library only.
"""

from __future__ import annotations

import random
import re

from backend.training.line_ops import LineOps, apply_ops, replace_tokens
from backend.training.scan import Token, code_names, scan

# ---------------------------------------------------------------------------------------------
# Bugs: a one-line mutation of the code; the task is to undo it
# ---------------------------------------------------------------------------------------------

_SWAPS = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "+": "-", "-": "+",
          "and": "or", "or": "and", "&&": "||", "||": "&&", "===": "!==", "!==": "===", "True": "False",
          "False": "True", "true": "false", "false": "true", "+=": "-=", "-=": "+=", "*": "/", "is": "is not"}
_BUG_WORDS = {"swap": "wrong operator", "off_by_one": "off-by-one error", "variable": "wrong variable",
              "condition": "inverted condition"}


def mutate_line(lines: list[str], language: str, rng: random.Random, kinds: tuple[str, ...] = tuple(_BUG_WORDS)) -> tuple[LineOps, str] | None:
    """A one-line mutation of one of `kinds` somewhere in the window: (its ops, the kind), or None."""
    tokens = [t for t in scan("".join(lines), language) if "\n" not in t.text]
    names = code_names(tokens, language)
    options: list[tuple[str, Token, str]] = []
    for index, token in enumerate(tokens):
        nxt = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.text in _SWAPS and token.kind in ("op", "name") and not (token.text in "+-" and index and tokens[index - 1].kind == "op"):
            if not (token.text == "is" and nxt is not None and nxt.text == "not"):
                options.append(("swap", token, _SWAPS[token.text]))
        if token.kind == "number" and token.text.isdigit() and int(token.text) < 100:
            options.append(("off_by_one", token, str(int(token.text) + rng.choice((1, -1)) if token.text != "0" else "1")))
        if token.kind == "name" and token.text in ("not", "!") and nxt is not None and nxt.line == token.line:
            options.append(("condition", token, ""))
        if token.kind == "name" and token.text in names and len(names) > 3:
            other = rng.choice(sorted(names))
            if other != token.text and len(names[other]) >= 2:
                options.append(("variable", token, other))
    options = [o for o in options if o[0] in kinds]
    if not options:
        return None
    kind, token, new = rng.choice(options)
    line = lines[token.line]
    if kind == "condition":
        end = token.col + len(token.text)
        while end < len(line) and line[end] == " ":
            end += 1
        new_line = line[: token.col] + line[end:]
    else:
        new_line = replace_tokens(line, [token], new)
    if new_line == line:
        return None
    return {token.line: [new_line]}, kind


def _enclosing_function(lines: list[str], index: int) -> str | None:
    for line in reversed(lines[: index + 1]):
        match = re.match(r"\s*(?:async\s+)?(?:def|function)\s+([A-Za-z_$][\w$]*)", line)
        if match:
            return match.group(1)
    return None


def fix_bug(lines: list[str], language: str, rng: random.Random) -> tuple[str, str, str] | None:
    """(buggy source, instruction, original) for an injected one-line bug."""
    mutated = mutate_line(lines, language, rng)
    if mutated is None:
        return None
    ops, kind = mutated
    (index,) = ops
    function = _enclosing_function(lines, index)
    options = ["Fix the bug.", "Fix the bug on line {n}.", "There is a {what} on line {n}; fix it.",
               "Fix the {what}.", "Line {n} has a bug: fix it."]
    if function:
        options += ["Fix bugs in {f}.", "Fix the {what} in {f}."]
    wording = rng.choice(options)
    return apply_ops(lines, ops), wording.format(n=index + 1, what=_BUG_WORDS[kind], f=function), "".join(lines)
