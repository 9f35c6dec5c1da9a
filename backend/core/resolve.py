"""The resolver: a program plus its input gives the edited text, byte for byte."""

from __future__ import annotations

from collections.abc import Sequence

from backend.core.lines import split_lines
from backend.core.program import CopyLines, CopyTokens, Gen, Op, parse_program


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
    ops = parse_program(program) if isinstance(program, str) else program
    if source_tokens is not None:
        _check_tokens(source_tokens, source)
    lines = split_lines(source)
    pieces = []
    for index, op in enumerate(ops, start=1):
        if isinstance(op, Gen):
            pieces.append(op.text)
        elif isinstance(op, CopyLines):
            pieces.extend(_copied(index, op, lines, "lines"))
        elif isinstance(op, CopyTokens):
            if source_tokens is None:
                raise ResolveError(
                    index, f"copy tokens {op.start}-{op.end} but no source tokenization was given"
                )
            pieces.extend(_copied(index, op, source_tokens, "tokens"))
        else:
            raise ResolveError(index, f"not a program op: {op!r}")
    return "".join(pieces)


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
