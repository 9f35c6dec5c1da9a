"""A small lexer for Python and JavaScript windows: names, numbers, strings, comments, operators.

Windows are cut from the middle of files, so they may not parse (an unclosed bracket, a dedent at
the start): `tokenize` and `ast` refuse them. This lexer never fails; what it needs to get right is
only which characters are code and which sit inside strings or comments, so that an edit never
touches text inside a string by accident. Standard library only.
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass

JS_KEYWORDS = frozenset(
    "break case catch class const continue debugger default delete do else export extends false finally "
    "for function if import in instanceof let new null return super switch this throw true try typeof "
    "undefined var void while with yield async await of static get set arguments".split()
)
PY_RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) | {"self", "cls"}

_PY = re.compile(
    r"""(?P<comment>\#[^\n]*)
    |(?P<string>[rRbBuUfF]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))
    |(?P<number>0[xX][0-9a-fA-F_]+|(?:\d[\d_]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+)j?)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>\*\*=|//=|>>=|<<=|->|:=|==|!=|<=|>=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|\*\*|//|<<|>>|[-+*/%<>=!&|^~@.,:;()\[\]{}])
    |(?P<space>\s+)
    |(?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)

_JS = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/)
    |(?P<string>'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"|`(?:\\.|[^\\`])*`)
    |(?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+))
    |(?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
    |(?P<op>===|!==|>>>=|\*\*=|\?\?=|&&=|\|\|=|=>|==|!=|<=|>=|&&|\|\||\?\?|\+\+|--|\+=|-=|\*=|/=|%=|\*\*|<<|>>>|>>|\?\.|[-+*/%<>=!&|^~?:.,;()\[\]{}])
    |(?P<space>\s+)
    |(?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str    # "name" | "number" | "string" | "comment" | "op" | "other"
    text: str
    line: int    # 0-based line index of the token's first character
    col: int     # 0-based column within that line


def scan(text: str, language: str) -> list[Token]:
    """Tokens of `text` (whitespace dropped). `language` is "python" or "javascript"."""
    pattern = _PY if language == "python" else _JS
    tokens = []
    line, line_start = 0, 0
    for match in pattern.finditer(text):
        kind = match.lastgroup or "other"
        start = match.start()
        if kind != "space":
            tokens.append(Token(kind, match.group(), line, start - line_start))
        newlines = match.group().count("\n")
        if newlines:
            line += newlines
            line_start = match.start() + match.group().rindex("\n") + 1
    return tokens


def is_reserved(name: str, language: str) -> bool:
    return name in (PY_RESERVED if language == "python" else JS_KEYWORDS)


def code_names(tokens: list[Token], language: str) -> dict[str, list[Token]]:
    """Occurrences of each renamable name: not reserved, never written as an attribute (`x.name`)
    and never a keyword argument / object key (`name=` in a call, `name:` in JS objects)."""
    occurrences: dict[str, list[Token]] = {}
    banned: set[str] = set()
    for index, token in enumerate(tokens):
        if token.kind != "name" or is_reserved(token.text, language):
            continue
        before = tokens[index - 1] if index else None
        after = tokens[index + 1] if index + 1 < len(tokens) else None
        if before is not None and before.kind == "op" and before.text in (".", "?."):
            banned.add(token.text)
        if after is not None and after.kind == "op" and after.text == ":" and language == "javascript":
            banned.add(token.text)
        keyword_argument = after is not None and after.text == "=" and before is not None and before.text in ("(", ",")
        if keyword_argument and language == "python":
            banned.add(token.text)
        occurrences.setdefault(token.text, []).append(token)
    return {name: found for name, found in occurrences.items() if name not in banned}
