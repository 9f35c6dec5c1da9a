"""The copy-as-decode grammar as a character automaton: the bottom layer of the token FSM
(`backend.core.fsm`), which knows characters only, nothing of tokens.

```
program := item* EOS ;  item := (copy | gen) "\\n"?
copy    := '<copy lines="' I '-' J '"/>'     1 <= I <= J <= n_lines, INT = [1-9][0-9]*
gen     := '<gen>' TEXT '</gen>'             TEXT non-empty, never containing '</gen>'
```

Every prefix this automaton accepts extends to a valid program for the input at hand: line
numbers stay within 1..n_lines with I <= J (a digit is allowed only if some number in range
starts with the digits so far), EOS only between items (an empty program included; the runtime
decides what to do with it). `<copy tokens=...>` is not offered: the decoder emits line copies only.

The grammar position is a small immutable "core" (the mode table below): `_step` reads one
character, `_next_chars` says which characters a core accepts, `_walk` reads a whole text.
Without the line count (n None) a digit of a line number cannot be judged: `_NEED_N` says so.
"""

from __future__ import annotations

from typing import Any, Optional

COPY_OPEN = '<copy lines="'
GEN_OPEN = "<gen>"
COPY_CLOSE = '"/>'
GEN_CLOSE = "</gen>"
_DIGITS = "0123456789"

# The grammar position ("core") is a small tuple whose first element names the mode. Tuples, not
# classes: `_step` builds one per character while masks are searched (~0.1 s per vocabulary).
BETWEEN = "between"   # (BETWEEN, newline_ok)        between items; EOS allowed; newline_ok: an item
                      #                              just ended and its optional "\n" is not read yet
IN_TAG = "tag"        # (IN_TAG, lit, I, J)          inside a tag literal; lit = text matched so far of
                      #                              COPY_OPEN, GEN_OPEN or COPY_CLOSE (I, J carried to '>')
FIRST_LINE = "first"  # (FIRST_LINE, digits)         the copy's first line number
LAST_LINE = "last"    # (LAST_LINE, digits, I)       the copy's last line number
IN_GEN = "gen"        # (IN_GEN, partial, has_text)  gen TEXT; partial = length of the trailing prefix of
                      #                              '</gen>', has_text = some text precedes that prefix
ENDED = "end"         # (ENDED,)                     after EOS

_ANY = object()  # _next_chars: every character (gen TEXT)
_NEED_N = object()  # _next_chars / _step: the line count is needed and unknown

Core = tuple[Any, ...]


def _extendable(digits: str, low: int, high: int) -> bool:
    """Whether some INT in [low, high] has decimal form starting with `digits` (no leading zero)."""
    if not digits or digits[0] == "0":
        return False
    value = int(digits)
    scale = 1
    while value * scale <= high:
        if (value + 1) * scale - 1 >= low:
            return True
        scale *= 10
    return False


def number_reaches(digits: str, low: int, high: int) -> bool:
    """Whether the line number begun with `digits` can still end up in [low, high]."""
    return _extendable(digits, low, high)


def number_can_grow(digits: str, low: int, n: int) -> bool:
    """Whether one more digit after `digits` still names a line in [low, n]: while it can, the line
    number being written is not final."""
    return any(_extendable(digits + d, low, n) for d in _DIGITS)


def _step(core: Core, ch: str, n: Optional[int], has_lines: bool) -> Any:
    """The core after reading `ch`, None when `ch` is not allowed, or _NEED_N when reading it
    needs the line count and `n` is None. Changes nothing."""
    mode = core[0]
    if mode == IN_GEN:
        partial, has_text = core[1], core[2]
        if partial == 5:
            if ch == ">":
                return (BETWEEN, True) if has_text else None
            return (IN_GEN, 1, True) if ch == "<" else (IN_GEN, 0, True)
        if ch == GEN_CLOSE[partial]:
            return (IN_GEN, partial + 1, has_text)
        if ch == "<":
            return (IN_GEN, 1, has_text or partial > 0)
        return (IN_GEN, 0, True)
    if mode == BETWEEN:
        if ch == "<":
            return (IN_TAG, "<", 0, 0)
        if ch == "\n" and core[1]:
            return (BETWEEN, False)
        return None
    if mode == IN_TAG:
        lit = core[1]
        if lit == "<":
            if ch == "g":
                return (IN_TAG, "<g", 0, 0)
            if ch == "c" and has_lines:
                return (IN_TAG, "<c", 0, 0)
            return None
        target = COPY_CLOSE if lit[0] == '"' else (COPY_OPEN if lit[1] == "c" else GEN_OPEN)
        if ch != target[len(lit)]:
            return None
        lit += ch
        if len(lit) < len(target):
            return (IN_TAG, lit, core[2], core[3])
        if target is COPY_OPEN:
            return (FIRST_LINE, "")
        if target is GEN_OPEN:
            return (IN_GEN, 0, False)
        return (BETWEEN, True)
    if mode == FIRST_LINE or mode == LAST_LINE:
        if n is None:  # only reachable as (FIRST_LINE, ""): a digit needs n, nothing else is allowed
            return _NEED_N if "0" <= ch <= "9" else None
        digits = core[1]
        low = 1 if mode == FIRST_LINE else core[2]
        if "0" <= ch <= "9":
            if _extendable(digits + ch, low, n):
                return (mode, digits + ch) if mode == FIRST_LINE else (LAST_LINE, digits + ch, low)
            return None
        if not digits or not (low <= int(digits) <= n):
            return None
        if mode == FIRST_LINE and ch == "-":
            return (LAST_LINE, "", int(digits))
        if mode == LAST_LINE and ch == '"':
            return (IN_TAG, '"', low, int(digits))
        return None
    return None


def _next_chars(core: Core, n: Optional[int], has_lines: bool) -> Any:
    """The characters `_step` accepts from `core`: a string, _ANY (gen TEXT), or _NEED_N."""
    mode = core[0]
    if mode == IN_GEN:
        return _ANY
    if mode == BETWEEN:
        return "<\n" if core[1] else "<"
    if mode == IN_TAG:
        lit = core[1]
        if lit == "<":
            return "cg" if has_lines else "g"
        target = COPY_CLOSE if lit[0] == '"' else (COPY_OPEN if lit[1] == "c" else GEN_OPEN)
        return target[len(lit)]
    if mode == FIRST_LINE or mode == LAST_LINE:
        if n is None:
            return _NEED_N
        return "".join(ch for ch in _DIGITS + '-"' if _step(core, ch, n, has_lines) is not None)
    return ""


def _walk(core: Core, text: str, n: Optional[int], has_lines: bool) -> Any:
    """`_step` over every character of `text`: the final core, None, or _NEED_N."""
    for ch in text:
        core = _step(core, ch, n, has_lines)
        if core is None or core is _NEED_N:
            return core
    return core
