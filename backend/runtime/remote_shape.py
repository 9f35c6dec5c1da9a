"""An instruction's program shape through a remote engine: copies written on the client, gens held
to the shape by the request's grammar.

In process the decoder refuses tokens that leave the shape (shape_guard.py). A server gives no
logits, so here the shape goes where remote.py already puts the grammar, one item per request. At
a kept line nothing is asked: the shape fixes the copy (the kept run from that line), and the client
writes it and its text, as it writes a copied rest (early_end.py). At a rewritten line or an
insertion point the request's grammar is a gen of the lines the shape allows there: one line per
rewritten slot (at most their run, at least one), or up to MAX_INSERTED_LINES new lines at a point,
each line one of its slot's quoted texts where the shape has them (line_shape.LineText), else any
line. When every slot is read the program ends without asking. Regex (vLLM, SGLang) and GBNF
(llama.cpp) say the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.core.line_shape import INSERT, KEEP, MAX_INSERTED_LINES, LineShape
from backend.core.program import CopyLines, Op
from backend.runtime.remote_client import ItemGrammar

_REGEX_SPECIAL = set("\\.^$|?*+()[]{}")


@dataclass(frozen=True)
class ShapeStep:
    """What the shape asks for next: `end` (every slot read), a `copy` the client writes, or a gen
    under `grammars` (plain, and for a prompt that already ends with the item's `<`)."""

    end: bool = False
    copy: CopyLines | None = None
    grammars: tuple[ItemGrammar, ItemGrammar] | None = None


def next_step(shape: LineShape, ops: list[Op]) -> ShapeStep:
    """The next item of a program in `shape` after `ops`. ValueError when `ops` left the shape (a
    server that ignored the grammar)."""
    position = shape.covered(ops)
    if position is None:
        raise ValueError("the server's program left the instruction's shape: does it enforce the grammar?")
    if position == shape.end:
        return ShapeStep(end=True)
    if shape.kind(position) == KEEP:
        return ShapeStep(copy=CopyLines(shape.line(position), shape.copy_end_limit(position)))
    return ShapeStep(grammars=(gen_grammar(line_choices(shape, position)),
                               gen_grammar(line_choices(shape, position), after_lt=True)))


def line_choices(shape: LineShape, position: int) -> list[tuple[str, ...] | None]:
    """For each line a gen at `position` may write, the texts it may be (None: any line)."""
    if shape.kind(position) == INSERT:
        quoted = shape.line_texts(position)
        return [_whole_lines(shape, position)] if quoted else [None] * MAX_INSERTED_LINES
    return [_whole_lines(shape, position + index) for index in range(shape.gen_room(position))]


def _whole_lines(shape: LineShape, slot: int) -> tuple[str, ...] | None:
    options = shape.line_texts(slot)
    return tuple(indent + option.text for option in options for indent in option.indents) or None


def gen_grammar(choices: list[tuple[str, ...] | None], *, after_lt: bool = False) -> ItemGrammar:
    """A gen of the first 1..len(choices) lines, line i one of choices[i] (or any line)."""
    lt = "" if after_lt else "<"
    regex_tail, rules = "", []
    for index in range(len(choices) - 1, -1, -1):
        line = _line_regex(choices[index])
        regex_tail = line + (f"(?:{regex_tail})?" if regex_tail else "")
        rest = f" l{index + 1}?" if index + 1 < len(choices) else ""
        rules.append(f"l{index} ::= {_line_gbnf(choices[index])}{rest}")
    gbnf = f'root ::= "{lt}gen>" l0 "</gen>"\n' + "\n".join(reversed(rules)) + "\n"
    return ItemGrammar(f"{lt}gen>{regex_tail}</gen>", gbnf)


def _line_regex(texts: tuple[str, ...] | None) -> str:
    if texts is None:
        return "[^\\n]*\\n"
    return "(?:" + "|".join(_regex_literal(text) for text in texts) + ")"


def _line_gbnf(texts: tuple[str, ...] | None) -> str:
    if texts is None:
        return '[^\\n]* "\\n"'
    return "(" + " | ".join(_gbnf_literal(text) for text in texts) + ")"


def _regex_literal(text: str) -> str:
    escaped = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return "".join(escaped.get(ch) or ("\\" + ch if ch in _REGEX_SPECIAL else ch) for ch in text)


def _gbnf_literal(text: str) -> str:
    escaped = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
    return '"' + "".join(escaped.get(ch, ch) for ch in text) + '"'
