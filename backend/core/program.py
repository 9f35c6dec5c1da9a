"""The program language: copy tags and generated text, with a strict parser and a renderer.

```
program := item* ;  item := (copy_lines | copy_tokens | gen) ("\\n" | "\\r\\n")?
copy_lines  := '<copy lines="' INT '-' INT '"/>'     1-based, inclusive, 1 <= i <= j
copy_tokens := '<copy tokens="' INT '-' INT '"/>'    1-based, inclusive
gen         := '<gen>' TEXT '</gen>'                 TEXT: any text not containing '</gen>'
INT         := [1-9][0-9]*
```

No escaping exists: a text holding `</gen>` is split into two gens between `</` and `gen>`
(`gen_ops`), so every text is representable and the closing tag never appears inside a gen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Union

GEN_OPEN = "<gen>"
GEN_CLOSE = "</gen>"
_COPY_PREFIX = "<copy "
_COPY_SUFFIX = '"/>'
# No input has 10**18 lines; the cap also keeps int() clear of Python's 4300-digit limit.
_MAX_DIGITS = 18
# Where gen_ops cuts an occurrence of the closing tag: after "</", before "gen>".
_CLOSE_CUT = 2


def _check_range(kind: str, start: object, end: object) -> None:
    """Reject a copy range that is not 1 <= start <= end with plain ints."""
    for name, value in (("start", start), ("end", end)):
        # bool is an int subclass; True as a line number is a bug, not a line.
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{kind}: {name} must be an int, got {value!r}")
    if start < 1:  # type: ignore[operator]
        raise ValueError(f"{kind}: start must be >= 1 (numbers are 1-based), got {start}")
    if end < start:  # type: ignore[operator]
        raise ValueError(f"{kind}: start {start} > end {end}")


@dataclass(frozen=True)
class CopyLines:
    """Copy input lines start..end (1-based, inclusive). Rejects start < 1 and end < start."""

    start: int
    end: int

    def __post_init__(self) -> None:
        _check_range("CopyLines", self.start, self.end)


@dataclass(frozen=True)
class CopyTokens:
    """Copy input tokens start..end (1-based, inclusive) of the input's tokenization.

    Rejects start < 1 and end < start.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        _check_range("CopyTokens", self.start, self.end)


@dataclass(frozen=True)
class Gen:
    """Emit `text` verbatim. Rejects a non-str text and text containing `</gen>` (see `gen_ops`)."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ValueError(f"Gen: text must be a str, got {type(self.text).__name__}")
        if GEN_CLOSE in self.text:
            raise ValueError("Gen: text contains '</gen>'; build it with gen_ops(text)")


Op = Union[CopyLines, CopyTokens, Gen]


class ProgramError(ValueError):
    """A malformed program: `position` is the 0-based char offset, `reason` says what is wrong."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"at char {position}: {reason}")
        self.position = position
        self.reason = reason


def tag_text(op: Op) -> tuple[str, ...]:
    """The exact tag strings the model emits for `op`, for counting tag tokens.

    A copy gives its one tag, e.g. `('<copy lines="12-305"/>',)`; a gen gives
    `("<gen>", "</gen>")` (its text is not a tag). Rejects anything that is not an Op (TypeError).
    """
    if isinstance(op, CopyLines):
        return (f'<copy lines="{op.start}-{op.end}"/>',)
    if isinstance(op, CopyTokens):
        return (f'<copy tokens="{op.start}-{op.end}"/>',)
    if isinstance(op, Gen):
        return (GEN_OPEN, GEN_CLOSE)
    raise TypeError(f"not a program op: {op!r}")


def gen_ops(text: str) -> list[Gen]:
    """Gens that emit `text` exactly: one gen, or several cut inside each `</gen>`.

    Each `</gen>` is cut between `</` and `gen>`, so no piece holds the closing tag (the tag
    cannot overlap itself, so one cut per occurrence suffices). `gen_ops("") == []`.
    Rejects nothing.
    """
    cuts = []
    found = text.find(GEN_CLOSE)
    while found != -1:
        cuts.append(found + _CLOSE_CUT)
        found = text.find(GEN_CLOSE, found + len(GEN_CLOSE))
    bounds = [0, *cuts, len(text)]
    return [Gen(text[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def merge_gens(ops: Iterable[Op]) -> list[Op]:
    """`ops` with each run of adjacent gens joined into as few gens as `gen_ops` allows.

    Joining can recreate `</gen>` across a boundary, so runs are re-cut with `gen_ops`; empty
    gens vanish. Rejects nothing beyond what Op construction rejects.
    """
    merged: list[Op] = []
    pending: list[str] = []
    for op in ops:
        if isinstance(op, Gen):
            pending.append(op.text)
            continue
        merged.extend(gen_ops("".join(pending)))
        pending = []
        merged.append(op)
    merged.extend(gen_ops("".join(pending)))
    return merged


def render_program(ops: Sequence[Op]) -> str:
    """The program text: one item per line, each followed by `"\\n"`.

    Rejects anything that is not an Op (TypeError).
    """
    parts = []
    for op in ops:
        if isinstance(op, Gen):
            parts.append(f"{GEN_OPEN}{op.text}{GEN_CLOSE}\n")
        else:
            parts.append(tag_text(op)[0] + "\n")
    return "".join(parts)


def parse_program(text: str) -> list[Op]:
    """Parse a program strictly; `parse_program(render_program(ops)) == ops`.

    Rejects, with a ProgramError naming the char position and reason: an unclosed gen, an
    unknown tag, a copy tag with a missing or malformed number, a leading zero, a zero, a
    start greater than its end, a missing '-' or '"/>', and any text outside the tags
    (including a second newline after an item).
    """
    ops: list[Op] = []
    position = 0
    while position < len(text):
        op, position = _parse_item(text, position)
        ops.append(op)
        if text.startswith("\n", position):
            position += 1
        elif text.startswith("\r\n", position):  # a program file saved with CRLF line endings
            position += 2
    return ops


def _parse_item(text: str, position: int) -> tuple[Op, int]:
    """One item starting at `position`; returns it and the position after it.

    Rejects text that does not start a gen or a copy tag there.
    """
    if text.startswith(GEN_OPEN, position):
        return _parse_gen(text, position)
    if text.startswith(_COPY_PREFIX, position):
        return _parse_copy(text, position)
    if text.startswith("<", position):
        return _raise_unknown_tag(text, position)
    raise ProgramError(
        position, f"trailing junk {text[position:position + 12]!r}: expected '<copy' or '<gen>'"
    )


def _raise_unknown_tag(text: str, position: int) -> tuple[Op, int]:
    """Always raises: the tag at `position` is none of ours."""
    end = text.find(">", position)
    shown = text[position:end + 1] if 0 <= end < position + 40 else text[position:position + 12]
    raise ProgramError(position, f"unknown tag {shown!r}: expected '<copy' or '<gen>'")


def _parse_gen(text: str, position: int) -> tuple[Gen, int]:
    """A gen at `position`. Rejects one with no `</gen>` after it."""
    body_start = position + len(GEN_OPEN)
    close = text.find(GEN_CLOSE, body_start)
    if close == -1:
        raise ProgramError(position, "unclosed gen: no '</gen>' after '<gen>'")
    return Gen(text[body_start:close]), close + len(GEN_CLOSE)


def _parse_copy(text: str, position: int) -> tuple[Op, int]:
    """A copy tag at `position`.

    Rejects an attribute other than lines/tokens, a malformed number, a missing '-' or '"/>',
    and start > end.
    """
    cursor = position + len(_COPY_PREFIX)
    for attribute, kind in (('lines="', CopyLines), ('tokens="', CopyTokens)):
        if text.startswith(attribute, cursor):
            cursor += len(attribute)
            break
    else:
        raise ProgramError(cursor, "unknown copy attribute: expected 'lines=\"' or 'tokens=\"'")
    start, cursor = _parse_int(text, cursor, "start")
    if not text.startswith("-", cursor):
        raise ProgramError(cursor, "expected '-' in copy tag")
    end, cursor = _parse_int(text, cursor + 1, "end")
    if not text.startswith(_COPY_SUFFIX, cursor):
        raise ProgramError(cursor, "expected '\"/>' to close copy tag")
    if start > end:
        raise ProgramError(position, f"copy range {start}-{end} has start > end")
    return kind(start, end), cursor + len(_COPY_SUFFIX)


def _parse_int(text: str, position: int, name: str) -> tuple[int, int]:
    """An INT (`[1-9][0-9]*`) at `position`; returns it and the position after it.

    Rejects a missing number, a zero, a leading zero and more than 18 digits. Only ASCII digits
    count: `str.isdigit` would accept '²' or Arabic-Indic digits, which no model tag contains.
    """
    end = position
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    digits = text[position:end]
    if not digits:
        raise ProgramError(position, f"missing {name} number in copy tag")
    if digits == "0":
        raise ProgramError(position, f"{name} number is 0; numbers are 1-based")
    if digits[0] == "0":
        raise ProgramError(position, f"{name} number {digits!r} has a leading zero")
    if len(digits) > _MAX_DIGITS:
        raise ProgramError(position, f"{name} number has {len(digits)} digits; too large")
    return int(digits), end
