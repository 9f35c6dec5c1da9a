"""Single line edits on a code window: rename, literal, delete_line, delete_block, insert, replace_line.

Each generator takes the window's lines, the language and a seeded `random.Random`, and returns
(ops, instruction) (`line_ops.Single`) or None when the window offers no place for its kind. Line
numbers in instructions are 1-based, as the prompt shows the input. Standard library only.
"""

from __future__ import annotations

import random
import re

from backend.training.bug_edits import mutate_line
from backend.training.line_ops import EditMaker, LineOps, Single, comment_marker, replace_tokens
from backend.training.scan import Token, code_names, scan


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _body(line: str) -> str:
    return line.strip()


def _quote(code: str) -> str:
    return f"`{code}`"


# ---------------------------------------------------------------------------------------------
# Single edits: each returns (ops, instruction, lines it touches) or None
# ---------------------------------------------------------------------------------------------

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
        ops[index] = [replace_tokens(lines[index], [t for t in names[old] if t.line == index], new)]
    wording = rng.choice((
        "Rename {old} to {new}.", "Rename the variable `{old}` to `{new}` everywhere.",
        "Change the name `{old}` to `{new}` throughout.", "Use the name {new} instead of {old}.",
        "Rename `{old}` -> `{new}`.", "rename {old} to {new}",
    ))
    return ops, wording.format(old=old, new=new)


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
        ops = {token.line: [replace_tokens(lines[token.line], [token], new)]}
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
    comment = f"{comment_marker(language)} {rng.choice(_COMMENTS)}"
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
    mutated = mutate_line(lines, language, rng) or literal(lines, language, rng)
    if mutated is None:
        return None
    ops, _ = mutated
    (index, (new_line,)), = ops.items()
    wording = rng.choice(("Replace line {n} with {new}.", "Change line {n} to: {new}", "Line {n} should read {new}.",
                          "Rewrite line {n} as {new}."))
    return ops, wording.format(n=index + 1, new=_quote(_body(new_line)))


LINE_EDITS: dict[str, EditMaker] = {
    "literal": literal, "delete_line": delete_line, "insert": insert, "replace_line": replace_line,
}
