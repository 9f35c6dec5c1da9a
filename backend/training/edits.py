"""Verifiable edit tasks on a code window, each with an instruction in varied natural wording.

An edit is a set of line operations on the window (`LineOps`: 0-based line index -> the lines that
replace it; `[]` deletes it, `[new, old]` inserts before it), so several edits combine when they touch
different lines, and the target is exact by construction. Line numbers in instructions are 1-based,
as the prompt shows the input. Kinds:

    rename        an identifier renamed at every code occurrence in the window
    literal       a number or string literal changed on a named line
    delete_line   one statement line deleted          delete_block  a block (header + body) deleted
    insert        a comment, an import, a docstring or a statement inserted at a described place
    replace_line  a line replaced by a given new line
    multi         two or three of the line edits above at once
    snippet       "apply this update": the changed region with `... existing code ...` markers
    fix_bug       an injected bug (operator swap, off-by-one, wrong variable, inverted condition) to fix:
                  the source is the buggy window, the target the original

Standard library only. Every generator returns None when the window offers no place for its kind.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

from backend.training.scan import Token, code_names, scan

LineOps = dict[int, list[str]]


@dataclass(frozen=True)
class Edit:
    kind: str
    instruction: str
    source: str
    target: str


def apply_ops(lines: list[str], ops: LineOps) -> str:
    return "".join(part for index, line in enumerate(lines) for part in ops.get(index, [line]))


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _body(line: str) -> str:
    return line.strip()


def _comment(language: str) -> str:
    return "#" if language == "python" else "//"


def _quote(code: str) -> str:
    return f"`{code}`"


# ---------------------------------------------------------------------------------------------
# Single edits: each returns (ops, instruction, lines it touches) or None
# ---------------------------------------------------------------------------------------------

Single = tuple[LineOps, str]

_SYNONYMS = {"result": "output", "data": "payload", "value": "val", "name": "label", "items": "entries",
             "args": "arguments", "key": "field", "obj": "target", "path": "filepath", "text": "content",
             "line": "row", "lines": "rows", "count": "total", "index": "position", "i": "idx", "n": "size",
             "msg": "message", "err": "error", "e": "exc", "s": "string", "x": "item", "tmp": "scratch"}


def _new_name(old: str, rng: random.Random, taken: set[str]) -> str | None:
    camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), old) if "_" in old.strip("_") else None
    options = [_SYNONYMS.get(old), f"{old}_{rng.choice(('value', 'list', 'count', 'obj', 'new', 'map'))}",
               f"{rng.choice(('new', 'the', 'my', 'local', 'cur'))}_{old}", camel, old + "2"]
    if old[:1].isupper():
        options.append(rng.choice(("Base", "My", "Custom")) + old)
    for option in rng.sample([o for o in options if o], k=len([o for o in options if o])):
        if option not in taken and option != old:
            return option
    return None


def rename(lines: list[str], language: str, rng: random.Random) -> Single | None:
    tokens = scan("".join(lines), language)
    names = code_names(tokens, language)
    candidates = [name for name, found in names.items() if len(found) >= 2 and len(name) >= 1]
    if not candidates:
        return None
    old = rng.choice(sorted(candidates))
    new = _new_name(old, rng, {t.text for t in tokens})
    if new is None:
        return None
    ops: LineOps = {}
    for index in sorted({t.line for t in names[old]}):
        ops[index] = [_replace_tokens(lines[index], [t for t in names[old] if t.line == index], new)]
    wording = rng.choice((
        "Rename {old} to {new}.", "Rename the variable `{old}` to `{new}` everywhere.",
        "Change the name `{old}` to `{new}` throughout.", "Use the name {new} instead of {old}.",
        "Rename `{old}` -> `{new}`.", "rename {old} to {new}",
    ))
    return ops, wording.format(old=old, new=new)


def _replace_tokens(line: str, tokens: list[Token], new: str) -> str:
    for token in sorted(tokens, key=lambda t: t.col, reverse=True):
        line = line[: token.col] + new + line[token.col + len(token.text):]
    return line


def _literal_change(token: Token, rng: random.Random) -> str | None:
    if token.kind == "number":
        try:
            value = int(token.text, 0)
        except ValueError:
            return None
        return str(rng.choice((value + 1, value * 2, max(value - 1, 0), value + 10)))
    if token.kind == "string" and token.text[:1] in ("'", '"') and re.fullmatch(r"[\w .:/-]{1,30}", token.text[1:-1]):
        quote, inner = token.text[0], token.text[1:-1]
        words = ("default", "value", "name", "error", "data", "config", "result", "item")
        new_inner = rng.choice((inner.upper(), inner + "_" + rng.choice(words), rng.choice(words)))
        return quote + new_inner + quote if new_inner != inner and quote not in new_inner else None
    return None


def _single_line_tokens(lines: list[str], language: str, kinds: tuple[str, ...]) -> list[Token]:
    return [t for t in scan("".join(lines), language) if t.kind in kinds and "\n" not in t.text]


def literal(lines: list[str], language: str, rng: random.Random) -> Single | None:
    tokens = _single_line_tokens(lines, language, ("number", "string"))
    rng.shuffle(tokens)
    for token in tokens[:8]:
        new = _literal_change(token, rng)
        if new is None:
            continue
        ops = {token.line: [_replace_tokens(lines[token.line], [token], new)]}
        wording = rng.choice((
            "On line {n}, change {old} to {new}.", "Change {old} to {new} on line {n}.",
            "Line {n}: replace the value {old} with {new}.", "Set {old} on line {n} to {new} instead.",
            "In line {n} use {new} rather than {old}.",
        ))
        return ops, wording.format(n=token.line + 1, old=token.text, new=new)
    return None


def _bracket_depths(lines: list[str], language: str) -> list[int]:
    """Open-bracket depth at the start of each line, plus one entry for the end of the window."""
    depth_at = [0] * (len(lines) + 1)
    depth, line = 0, 0
    for token in scan("".join(lines), language):
        while line < token.line:
            line += 1
            depth_at[line] = depth
        if token.kind == "op" and token.text in "([{":
            depth += 1
        elif token.kind == "op" and token.text in ")]}":
            depth = max(0, depth - 1)
    while line < len(lines):
        line += 1
        depth_at[line] = depth
    return depth_at


_NOT_STATEMENT_START = ("@", "else", "elif", "except", "finally", "}", ")", "]", "#", "//", "*", "/*", '"""', "'''")


def _statement_lines(lines: list[str], language: str) -> list[int]:
    """Lines that hold one whole simple statement: not blank, not inside a call or literal (JS
    braces aside), not opening or closing a block, not a comment."""
    depth = _bracket_depths(lines, language)
    braces = language != "python"
    return [i for i, line in enumerate(lines)
            if line.strip() and (depth[i] == 0 or braces) and depth[i + 1] == depth[i]
            and not line.rstrip().endswith((":", "{", "(", "[", ",", "\\"))
            and line.strip() not in ("}", "});", "};", ")", "]", "})", "end")
            and not line.strip().startswith(_NOT_STATEMENT_START)]


def delete_line(lines: list[str], language: str, rng: random.Random) -> Single | None:
    candidates = _statement_lines(lines, language)
    if not candidates:
        return None
    index = rng.choice(candidates)
    code = _body(lines[index])
    unique = sum(_body(line) == code for line in lines) == 1
    wording = rng.choice(("Delete line {n}.", "Remove line {n}.", "Remove line {n} ({code}).", "Delete line {n}: {code}")
                         + (("Remove the line {code}.", "Delete the statement {code}.") if unique else ()))
    return {index: []}, wording.format(n=index + 1, code=_quote(code))


def _block_end(lines: list[str], header: int, language: str) -> int | None:
    """Last line of the block that `header` opens (Python: deeper indentation; JS: matching brace)."""
    if language == "python":
        width = len(_indent(lines[header]))
        end = header
        for index in range(header + 1, len(lines)):
            if lines[index].strip() and len(_indent(lines[index])) <= width:
                break
            if lines[index].strip():
                end = index
        return end if end > header else None
    depth = 0
    for index in range(header, len(lines)):
        for token in scan(lines[index], language):
            if token.kind == "op" and token.text in "{}":
                depth += 1 if token.text == "{" else -1
        if depth <= 0 and index > header:
            return index
    return None


def delete_block(lines: list[str], language: str, rng: random.Random) -> Single | None:
    opener = ":" if language == "python" else "{"
    headers = [i for i, line in enumerate(lines) if line.rstrip().endswith(opener) and i + 1 < len(lines)
               and not line.strip().startswith(("else", "elif", "except", "finally", "}", "try", "catch"))]
    rng.shuffle(headers)
    for header in headers[:6]:
        end = _block_end(lines, header, language)
        if end is None or end - header > 25 or (header == 0 and end == len(lines) - 1):
            continue
        if end + 1 < len(lines) and lines[end + 1].strip().startswith(("else", "elif", "except", "finally", "catch")):
            continue
        match = re.match(r"\s*(?:async\s+)?(?:def|class|function)\s+([A-Za-z_$][\w$]*)", lines[header])
        options = ["Delete lines {a}-{b}.", "Remove lines {a} to {b}.", "Remove the block starting at line {a} ({code})."]
        if match:
            options += ["Delete the function {name}.", "Remove `{name}` entirely."] if "class" not in lines[header].split("(")[0] else ["Remove the class {name}."]
        wording = rng.choice(options)
        return ({i: [] for i in range(header, end + 1)},
                wording.format(a=header + 1, b=end + 1, code=_quote(_body(lines[header])), name=match.group(1) if match else ""))
    return None


_COMMENTS = ("Validate the input before using it.", "This must run before the loop below.",
             "TODO: handle the empty case.", "Keep this in sync with the caller.", "Fast path for the common case.",
             "NOTE: order matters here.", "FIXME: this is slow on large inputs.", "See the module docstring.")
_PY_IMPORTS = ("import os", "import sys", "import re", "import json", "import logging", "from pathlib import Path",
               "from typing import Any", "import itertools", "import functools", "from collections import defaultdict")
_JS_IMPORTS = ("const path = require('path');", "const fs = require('fs');", "const util = require('util');",
               "'use strict';", "const assert = require('assert');")
_PY_STATEMENTS = ("logger.debug('checkpoint')", "assert result is not None", "print('debug')", "pass")
_JS_STATEMENTS = ("console.log('checkpoint');", "debugger;", "console.assert(result !== undefined);")
_DOCS = ("Return the result.", "Helper used by the public API.", "Compute the value from its inputs.",
         "Do the actual work.", "Internal: callers validate arguments first.")


def insert(lines: list[str], language: str, rng: random.Random) -> Single | None:
    choice = rng.random()
    if choice < 0.35:
        return _insert_comment(lines, language, rng)
    if choice < 0.55:
        return _insert_import(lines, language, rng)
    if choice < 0.75:
        return _insert_docstring(lines, language, rng)
    return _insert_statement(lines, language, rng)


def _insert_comment(lines: list[str], language: str, rng: random.Random) -> Single | None:
    candidates = [i for i in _statement_lines(lines, language)]
    if not candidates:
        return None
    index = rng.choice(candidates)
    comment = f"{_comment(language)} {rng.choice(_COMMENTS)}"
    wording = rng.choice(("Add the comment {c} above line {n}.", "Insert a comment before line {n}: {c}",
                          "Put {c} on a new line just before line {n}.", "Add a comment line `{raw}` above line {n}."))
    return ({index: [_indent(lines[index]) + comment + "\n", lines[index]]},
            wording.format(c=_quote(comment), n=index + 1, raw=comment))


def _insert_import(lines: list[str], language: str, rng: random.Random) -> Single | None:
    text = "".join(lines)
    pool = [s for s in (_PY_IMPORTS if language == "python" else _JS_IMPORTS) if s not in text]
    if not pool:
        return None
    statement = rng.choice(pool)
    wording = rng.choice(("Add {s} at the top.", "Insert {s} as the first line.", "Add the import {s} at the very top of the file.",
                          "Start the file with {s}."))
    return {0: [statement + "\n", lines[0]]}, wording.format(s=_quote(statement))


def _insert_docstring(lines: list[str], language: str, rng: random.Random) -> Single | None:
    doc = rng.choice(_DOCS)
    for index in rng.sample(range(len(lines)), k=len(lines)):
        match = re.match(r"(\s*)(?:async\s+)?(def|function)\s+([A-Za-z_$][\w$]*)", lines[index])
        if not match or index + 1 >= len(lines):
            continue
        name = match.group(3)
        if language == "python":
            if not lines[index].rstrip().endswith(":") or lines[index + 1].strip().startswith(('"""', "'''", 'r"""')):
                continue
            body = _indent(lines[index + 1]) if lines[index + 1].strip() else match.group(1) + "    "
            ops = {index + 1: [f'{body}"""{doc}"""\n', lines[index + 1]]}
        else:
            if index > 0 and lines[index - 1].strip().endswith("*/"):
                continue
            ops = {index: [f"{match.group(1)}/** {doc} */\n", lines[index]]}
        wording = rng.choice(("Add a docstring to {f}: {d}", "Document {f} with the docstring \"{d}\".",
                              "Give `{f}` the doc comment: {d}") if language == "python" else
                             ("Add the JSDoc comment /** {d} */ above {f}.", "Document the function {f}: {d}"))
        return ops, wording.format(f=name, d=doc)
    return None


def _insert_statement(lines: list[str], language: str, rng: random.Random) -> Single | None:
    candidates = _statement_lines(lines, language)
    if not candidates:
        return None
    index = rng.choice(candidates)
    statement = rng.choice(_PY_STATEMENTS if language == "python" else _JS_STATEMENTS)
    wording = rng.choice(("Insert {s} after line {n}.", "Add {s} right after line {n}.", "After line {n}, add the line {s}."))
    return ({index: [lines[index], _indent(lines[index]) + statement + "\n"]},
            wording.format(s=_quote(statement), n=index + 1))


def replace_line(lines: list[str], language: str, rng: random.Random) -> Single | None:
    mutated = _mutate_line(lines, language, rng) or literal(lines, language, rng)
    if mutated is None:
        return None
    ops, _ = mutated
    (index, (new_line,)), = ops.items()
    wording = rng.choice(("Replace line {n} with {new}.", "Change line {n} to: {new}", "Line {n} should read {new}.",
                          "Rewrite line {n} as {new}."))
    return ops, wording.format(n=index + 1, new=_quote(_body(new_line)))


# ---------------------------------------------------------------------------------------------
# Bugs: a one-line mutation of the code; the task is to undo it
# ---------------------------------------------------------------------------------------------

_SWAPS = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "+": "-", "-": "+",
          "and": "or", "or": "and", "&&": "||", "||": "&&", "===": "!==", "!==": "===", "True": "False",
          "False": "True", "true": "false", "false": "true", "+=": "-=", "-=": "+=", "*": "/", "is": "is not"}
_BUG_WORDS = {"swap": "wrong operator", "off_by_one": "off-by-one error", "variable": "wrong variable",
              "condition": "inverted condition"}


def _mutate_line(lines: list[str], language: str, rng: random.Random, kinds: tuple[str, ...] = tuple(_BUG_WORDS)) -> tuple[LineOps, str] | None:
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
        new_line = _replace_tokens(line, [token], new)
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
    mutated = _mutate_line(lines, language, rng)
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


# ---------------------------------------------------------------------------------------------
# Combinations: several edits, update snippets
# ---------------------------------------------------------------------------------------------

LINE_EDITS: dict[str, Callable[[list[str], str, random.Random], Single | None]] = {
    "literal": literal, "delete_line": delete_line, "insert": insert, "replace_line": replace_line,
}


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
        first = _mutate_line(lines, language, rng) or literal(lines, language, rng)
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
    marker = f"{_comment(language)} ... existing code ..."
    body = ([marker + "\n"] if before > 0 else []) + shown + ([marker + "\n"] if after < len(lines) - 1 else [])
    if shown == lines[before:after + 1] or not "".join(shown).strip():
        return None
    lead = rng.choice(("Apply this update:", "Apply the following edit (unchanged code is elided):",
                       "Update the code as shown:", "Merge this snippet into the file:", "Apply this change:"))
    return ops, f"{lead}\n```\n{''.join(body)}```"


# ---------------------------------------------------------------------------------------------
# One edit of a named kind
# ---------------------------------------------------------------------------------------------

SINGLE_KINDS: dict[str, Callable[[list[str], str, random.Random], Single | None]] = {
    "rename": rename, "literal": literal, "delete_line": delete_line, "delete_block": delete_block,
    "insert": insert, "replace_line": replace_line, "multi": multi, "snippet": snippet,
}
KINDS = (*SINGLE_KINDS, "fix_bug")


def make_edit(window: str, language: str, kind: str, rng: random.Random) -> Edit | None:
    """An edit of `kind` on `window`, or None when the window has no place for it."""
    lines = window.splitlines(keepends=True)
    if kind == "fix_bug":
        found = fix_bug(lines, language, rng)
        if found is None:
            return None
        source, instruction, target = found
        return Edit(kind, instruction, source, target) if source != target else None
    single = SINGLE_KINDS[kind](lines, language, rng)
    if single is None:
        return None
    ops, instruction = single
    target = apply_ops(lines, ops)
    return Edit(kind, instruction, window, target) if target != window else None
