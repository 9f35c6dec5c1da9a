"""The resolver: a program plus its input gives the edited text, byte for byte."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from backend.core.lines import split_lines
from backend.core.program import CopyLines, CopyTokens, Gen, Op, parse_program

SpanKind = Literal["copy", "gen"]


class ResolveError(ValueError):
    """A program that does not fit its input.

    `op_index` is the 1-based index of the offending op (None when the problem is not one op's,
    e.g. a tokenization that does not concatenate to the source); `reason` says what is wrong.
    """

    def __init__(self, op_index: int | None, reason: str) -> None:
        super().__init__(reason if op_index is None else f"op {op_index}: {reason}")
        self.op_index = op_index
        self.reason = reason


def resolve_program(
    program: str | Sequence[Op],
    source: str,
    *,
    source_tokens: Sequence[str] | None = None,
) -> str:
    """The text `program` produces from `source`. Deterministic and byte-exact.

    `program` is program text (parsed strictly) or a sequence of ops. `source_tokens` is the
    source's tokenization as text pieces concatenating to `source`; only `CopyTokens` needs it.
    Rejects (ProgramError) malformed program text, and (ResolveError) a copy range past the end
    of the input, a `CopyTokens` without `source_tokens`, `source_tokens` that do not concatenate
    to `source`, and an item that is not an op.
    """
    return "".join(text for text, _ in resolve_spans(program, source, source_tokens=source_tokens))


def resolve_spans(
    program: str | Sequence[Op],
    source: str,
    *,
    source_tokens: Sequence[str] | None = None,
) -> list[tuple[str, SpanKind]]:
    """The output of `program` as one `(text, kind)` span per op, in order: kind "copy" for a copy
    (the copied lines or tokens, joined) and "gen" for a gen. The texts concatenate to
    `resolve_program(program, source)`. Rejects exactly what `resolve_program` rejects."""
    ops = parse_program(program) if isinstance(program, str) else program
    if source_tokens is not None:
        _check_tokens(source_tokens, source)
    lines = split_lines(source)
    spans: list[tuple[str, SpanKind]] = []
    for index, op in enumerate(ops, start=1):
        if isinstance(op, Gen):
            spans.append((op.text, "gen"))
        elif isinstance(op, CopyLines):
            spans.append(("".join(_copied(index, op, lines, "lines")), "copy"))
        elif isinstance(op, CopyTokens):
            if source_tokens is None:
                raise ResolveError(
                    index, f"copy tokens {op.start}-{op.end} but no source tokenization was given"
                )
            spans.append(("".join(_copied(index, op, source_tokens, "tokens")), "copy"))
        else:
            raise ResolveError(index, f"not a program op: {op!r}")
    return spans


def _copied(index: int, op: CopyLines | CopyTokens, units: Sequence[str], kind: str) -> Sequence[str]:
    """Units start..end (1-based, inclusive) of `units`. Rejects a range past the end."""
    if op.end > len(units):
        raise ResolveError(
            index, f"copy {kind} {op.start}-{op.end} but the input has {len(units)} {kind}"
        )
    return units[op.start - 1:op.end]


def _check_tokens(source_tokens: Sequence[str], source: str) -> None:
    """Rejects a tokenization with a non-str piece or one that does not concatenate to `source`."""
    for position, piece in enumerate(source_tokens, start=1):
        if not isinstance(piece, str):
            raise ResolveError(None, f"source token {position} is not a str: {piece!r}")
    if "".join(source_tokens) != source:
        raise ResolveError(None, "source_tokens do not concatenate to the source")
