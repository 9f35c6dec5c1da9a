"""stdlib-probe: a seeded set of small edits to long, real Python standard-library files.

Our stand-in for the study's unpublished probe set. Deterministic for a given seed and interpreter:
- Files: the running interpreter's `Lib/*.py` (top level only, sorted by name) with MIN_LINES..MAX_LINES
  lines (300..1500, the same upper bound as the commits corpus), valid UTF-8, not `_sysconfigdata*`
  (generated per machine).
- Case i gets edit kind KINDS[i % 5] (30 of each for 150 cases) and a file drawn by a seeded RNG
  (`random.Random(f"stdlib-probe:{seed}")`; files may repeat, edits differ).
- Kinds, each one small edit whose result still parses (`ast.parse`):
    change_line     one operator/keyword token on one line swapped (`==`->`!=`, `<`->`<=`, `and`->`or`,
                    `True`->`False`, `+`->`-`, ...), found with `tokenize`, so never inside a string;
    insert_line     a comment line inserted before a statement, at the statement's indentation;
    delete_line     a one-line simple statement deleted from a body that keeps >= 1 statement;
    rename_identifier  one local variable renamed at every occurrence within ONE function (the function
                    that assigns it, nested scopes included), to a name not used anywhere in the file;
    alter_constant  one int/float literal changed (+1, x2 or /2), written in the literal's own base.
- Each case records the Python version, the file name, its sha256 and line count, the seed and the edit
  (`meta["edit"]`: kind, line numbers, before/after text) so the set can be checked and regenerated;
  `probe_manifest()` lists every eligible file with its hash.
A different interpreter (another patch release) has other files, hence another set: compare
`python_version` and the hashes in the manifest.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import io
import platform
import random
import re
import sysconfig
import tokenize
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backend.data.cases import CorpusError, EditCase
from backend.core.lines import split_lines, strip_line_ending

KINDS = ("change_line", "insert_line", "delete_line", "rename_identifier", "alter_constant")
DEFAULT_COUNT = 150
DEFAULT_SEED = 0
MIN_LINES = 300
MAX_LINES = 1500

_SWAPS = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "+": "-", "-": "+",
          "and": "or", "or": "and", "True": "False", "False": "True", "+=": "-=", "-=": "+="}
_COMMENTS = (
    "# Keep this check before the fallback below.",
    "# NOTE: callers rely on this order.",
    "# Edge cases are documented in the tests.",
    "# Fast path first: it covers the common case.",
    "# See the module docstring for the rationale.",
)
_SUFFIXES = ("value", "tmp", "obj", "item", "local")
_SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Pass, ast.Break,
           ast.Continue, ast.Raise, ast.Import, ast.ImportFrom, ast.Assert, ast.Delete)


@dataclass(frozen=True)
class StdlibFile:
    name: str
    text: str
    sha256: str
    lines: int


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(directory: Path | None = None) -> list[StdlibFile]:
    """Eligible files of `directory` (default: this interpreter's stdlib), sorted by name."""
    directory = directory or stdlib_dir()
    files = []
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_sysconfigdata"):
            continue
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        count = len(split_lines(text))
        if MIN_LINES <= count <= MAX_LINES:
            files.append(StdlibFile(path.name, text, hashlib.sha256(data).hexdigest(), count))
    return files


def probe_manifest(seed: int = DEFAULT_SEED, count: int = DEFAULT_COUNT, *, directory: Path | None = None) -> dict[str, Any]:
    """What is needed to regenerate or check the set: interpreter, parameters and every eligible file's hash."""
    return {
        "kind": "stdlib-probe-manifest",
        "seed": seed,
        "count": count,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "stdlib_dir": str(directory or stdlib_dir()),
        "min_lines": MIN_LINES,
        "max_lines": MAX_LINES,
        "kinds": list(KINDS),
        "files": [{"name": f.name, "sha256": f.sha256, "lines": f.lines} for f in stdlib_files(directory)],
    }


def generate_probe(seed: int = DEFAULT_SEED, count: int = DEFAULT_COUNT, *, directory: Path | None = None) -> list[EditCase]:
    """`count` probe cases for `seed`; same seed and interpreter, same cases. Raises CorpusError if the
    directory has no eligible file."""
    files = stdlib_files(directory)
    if not files:
        raise CorpusError(f"no standard-library file with {MIN_LINES}-{MAX_LINES} lines under {directory or stdlib_dir()}")
    rng = random.Random(f"stdlib-probe:{seed}")
    parsed: dict[str, _Parsed] = {}
    cases = []
    version = platform.python_version()
    for index in range(count):
        kind = KINDS[index % len(KINDS)]
        for _attempt in range(100):
            chosen = rng.choice(files)
            if chosen.name not in parsed:
                parsed[chosen.name] = _Parsed.of(chosen.text)
            made = _EDITORS[kind](parsed[chosen.name], rng)
            # rename_identifier checked the target's tree already; the others are re-parsed here.
            if made is not None and (kind == "rename_identifier" or _parses(made[0])):
                break
        else:  # pragma: no cover - every stdlib file offers dozens of candidates of each kind
            raise RuntimeError(f"could not make a {kind} edit")
        target, instruction, edit = made
        cases.append(
            EditCase(
                id=f"stdlib-probe/{index:03d}/{chosen.name}:{kind}",
                source=chosen.text,
                target=target,
                instruction=instruction,
                language="python",
                meta={"python_version": version, "stdlib_file": chosen.name, "file_sha256": chosen.sha256,
                      "file_lines": chosen.lines, "seed": seed, "edit": edit},
            )
        )
    return cases


# --- editing ---------------------------------------------------------------------------------------

@dataclass
class _Parsed:
    text: str
    lines: list[str]
    tree: ast.Module
    nodes: list[ast.AST]
    _tokens: list[tokenize.TokenInfo] | None = None

    @classmethod
    def of(cls, text: str) -> "_Parsed":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid-escape SyntaxWarnings in old stdlib strings
            tree = ast.parse(text)
        return cls(text, split_lines(text), tree, list(ast.walk(tree)))

    @property
    def tokens(self) -> list[tokenize.TokenInfo]:
        # tokenize is pure Python (~20 ms per 1000 lines): only change_line needs it, so lazily.
        if self._tokens is None:
            self._tokens = list(tokenize.generate_tokens(io.StringIO(self.text).readline))
        return self._tokens

    def body(self, number: int) -> str:
        return strip_line_ending(self.lines[number - 1])

    def ending(self, number: int) -> str:
        line = self.lines[number - 1]
        return line[len(strip_line_ending(line)):] or "\n"


def _parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except SyntaxError:
        return False
    return True


def _char_col(line: str, byte_col: int) -> int:
    """ast column offsets count UTF-8 bytes; convert to a str index."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def _replace_line(parsed: _Parsed, number: int, new_body: str) -> str:
    lines = list(parsed.lines)
    lines[number - 1] = new_body + parsed.ending(number)
    return "".join(lines)


def _change_line(parsed: _Parsed, rng: random.Random):
    candidates = [t for t in parsed.tokens
                  if t.type in (tokenize.OP, tokenize.NAME) and t.string in _SWAPS and t.start[0] == t.end[0]]
    token = rng.choice(candidates)
    number, col = token.start
    old = parsed.body(number)
    new = old[:col] + _SWAPS[token.string] + old[token.end[1]:]
    instruction = f"Change line {number} from `{old.strip()}` to `{new.strip()}`."
    edit = {"kind": "change_line", "line": number, "before": old, "after": new,
            "token": token.string, "replacement": _SWAPS[token.string]}
    return _replace_line(parsed, number, new), instruction, edit


def _first_lines(parsed: _Parsed) -> list[tuple[int, int]]:
    """(line, indent) of statements that start their line (decorators count as the statement's start)."""
    starts = []
    for node in parsed.nodes:
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        line = parsed.body(first)
        indent = len(line) - len(line.lstrip(" \t"))
        decorated = first != node.lineno
        if decorated or _char_col(line, node.col_offset) == indent:
            starts.append((first, indent))
    return sorted(set(starts))


def _insert_line(parsed: _Parsed, rng: random.Random):
    number, indent = rng.choice(_first_lines(parsed))
    new = parsed.body(number)[:indent] + rng.choice(_COMMENTS)
    lines = list(parsed.lines)
    lines.insert(number - 1, new + parsed.ending(number))
    instruction = f"Insert the line `{new.strip()}` before line {number}, indented like it."
    edit = {"kind": "insert_line", "line": number, "before": None, "after": new}
    return "".join(lines), instruction, edit


def _delete_line(parsed: _Parsed, rng: random.Random):
    candidates = []
    for node in parsed.nodes:
        for attribute in ("body", "orelse", "finalbody"):
            body = getattr(node, attribute, None)
            if not isinstance(body, list) or len(body) < 2:
                continue
            for statement in body:
                if isinstance(statement, _SIMPLE) and statement.lineno == statement.end_lineno:
                    line = parsed.body(statement.lineno)
                    start = _char_col(line, statement.col_offset)
                    end = _char_col(line, statement.end_col_offset)
                    rest = line[end:].strip()
                    if not line[:start].strip() and (not rest or rest.startswith("#")):
                        candidates.append(statement.lineno)
    if not candidates:
        return None
    number = rng.choice(sorted(set(candidates)))
    old = parsed.body(number)
    lines = list(parsed.lines)
    del lines[number - 1]
    instruction = f"Delete line {number}: `{old.strip()}`."
    edit = {"kind": "delete_line", "line": number, "before": old, "after": None}
    return "".join(lines), instruction, edit


def _rename_identifier(parsed: _Parsed, rng: random.Random):
    functions = [n for n in parsed.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    choices = []
    for function in functions:
        declared = {name for n in ast.walk(function) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
        stored = sorted({n.id for n in _body_nodes(function)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in declared})
        choices += [(function, name) for name in stored]
    if not choices:
        return None
    function, old = rng.choice(choices)
    new = f"{old}_{rng.choice(_SUFFIXES)}"
    if re.search(rf"\b{re.escape(new)}\b", parsed.text):
        return None  # the new name must be unused anywhere in the file
    nodes = [n for n in _body_nodes(function) if isinstance(n, ast.Name) and n.id == old]
    if len(nodes) < 2 or any(n.lineno != n.end_lineno for n in nodes):
        return None
    lines = list(parsed.lines)
    by_line: dict[int, list[int]] = {}
    for node in nodes:
        by_line.setdefault(node.lineno, []).append(_char_col(parsed.body(node.lineno), node.col_offset))
    for number, cols in by_line.items():
        body = parsed.body(number)
        for col in sorted(cols, reverse=True):
            if body[col:col + len(old)] != old:
                return None  # position mismatch (e.g. inside an f-string): draw again
            body = body[:col] + new + body[col + len(old):]
        lines[number - 1] = body + parsed.ending(number)
    target = "".join(lines)
    if not _same_tree_after_rename(parsed.text, target, function, old, new):
        return None
    numbers = sorted(by_line)
    instruction = (f"In function `{function.name}`, rename the local variable `{old}` to `{new}` "
                   f"({len(nodes)} occurrences, lines {numbers[0]}-{numbers[-1]}).")
    edit = {"kind": "rename_identifier", "function": function.name, "old": old, "new": new,
            "lines": numbers, "occurrences": len(nodes)}
    return target, instruction, edit


def _body_nodes(function: ast.AST) -> list[ast.AST]:
    """Nodes of a function's body (nested scopes included); decorators, defaults and annotations are
    evaluated in the enclosing scope, so they are not the function's own names."""
    return [node for statement in function.body for node in ast.walk(statement)]  # type: ignore[attr-defined]


def _same_tree_after_rename(source: str, target: str, function: ast.AST, old: str, new: str) -> bool:
    """The target's function equals the source's with exactly its body's `old` Names renamed to `new`
    (only lines of that body changed, so comparing the function is enough)."""
    where = (function.lineno, function.col_offset)  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(target)
        except SyntaxError:
            return False
    found = [n for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and (n.lineno, n.col_offset) == where]
    if len(found) != 1:
        return False
    expected = copy.deepcopy(function)  # a private copy: the cached source tree stays untouched
    for name in _body_nodes(expected):
        if isinstance(name, ast.Name) and name.id == old:
            name.id = new
    return ast.dump(expected, include_attributes=False) == ast.dump(found[0], include_attributes=False)


def _literal(value: int | float, old_text: str) -> str:
    lowered = old_text.lower()
    if isinstance(value, int):
        for prefix, fmt in (("0x", "x"), ("0o", "o"), ("0b", "b")):
            if lowered.startswith(prefix):
                return old_text[:2] + format(value, fmt)
        return str(value)
    return repr(value)


def _alter_constant(parsed: _Parsed, rng: random.Random):
    candidates = [n for n in parsed.nodes
                  if isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.lineno == n.end_lineno]
    if not candidates:
        return None
    node = rng.choice(candidates)
    number = node.lineno
    body = parsed.body(number)
    start, end = _char_col(body, node.col_offset), _char_col(body, node.end_col_offset)
    old_text = body[start:end]
    try:
        if ast.literal_eval(old_text) != node.value:
            return None
    except (ValueError, SyntaxError):
        return None
    value = node.value
    step = rng.choice(("plus", "double"))
    if isinstance(value, int):
        new_value: int | float = value + 1 if step == "plus" or value < 2 else value * 2
    else:
        new_value = value + 1.0 if step == "plus" else (value / 2 if value else 0.5)
    new_text = _literal(new_value, old_text)
    new = body[:start] + new_text + body[end:]
    instruction = f"On line {number}, change the constant `{old_text}` to `{new_text}`."
    edit = {"kind": "alter_constant", "line": number, "before": body, "after": new,
            "old": old_text, "new": new_text, "column": start}
    return _replace_line(parsed, number, new), instruction, edit


_EDITORS: dict[str, Callable[[_Parsed, random.Random], Any]] = {
    "change_line": _change_line,
    "insert_line": _insert_line,
    "delete_line": _delete_line,
    "rename_identifier": _rename_identifier,
    "alter_constant": _alter_constant,
}
