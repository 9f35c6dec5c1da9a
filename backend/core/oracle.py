"""The oracle: the best program turning a known source into a known target.

Units are lines (`split_lines`) at line granularity and tokenizer pieces at token granularity.
A copy covers a run of consecutive target units equal to consecutive source units (any source
range, any order, any number of times); a gen covers everything else. Two objectives:

- "coverage": copy as many target tokens as possible (the copy ceiling), then use fewest ops.
- "cost": least estimated decode cost under a `CostModel` (decode-step units): generated and tag
  tokens cost a step each; a copy costs one prefill of its span, `copy_fixed + copy_per_token*N`.

Both are one exact dynamic program over target positions, in `backend.core.cover` (which also
says how copy openings are pruned when the matching pairs are too many); `CostModel` is in
`backend.core.cost_model`. This module turns texts into units and weights (`_Pricing`) and the
cover's segments into ops, and prices a given program the same way (`program_cost`).

Costs are estimates: a gen's text is counted unit by unit (a tokenizer merges across line ends,
so the whole text can be a few tokens shorter), a copy tag is priced as a fixed part plus the
tokens of its two numbers, the optional newline after each item is not counted, and splitting a
gen around a literal `</gen>` (its extra tag pair) is not counted.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import lru_cache

from backend.core.cost_model import CostModel
from backend.core.cover import _cheapest_cover, _copy_openings, _Segment, _unit_ids, _Weights
from backend.core.lines import split_lines
from backend.core.program import (
    GEN_CLOSE,
    GEN_OPEN,
    CopyLines,
    CopyTokens,
    Gen,
    Op,
    gen_ops,
    merge_gens,
    tag_text,
)

Tokenize = Callable[[str], Sequence[str]]

GRANULARITIES = ("line", "token")
OBJECTIVES = ("coverage", "cost")

# Without a tokenizer: `<copy lines="12-305"/>` is 11 tokens under Qwen2.5 and SmolLM2, which
# split digits one per token: 6 for `<`, `copy`, ` lines`, `="`, `-`, `"/>` plus 5 digits.
APPROX_COPY_TAG_FIXED_TOKENS = 6
# `<gen>` and `</gen>` are ~3 tokens each (`<`/`</`, `gen`, `>`).
APPROX_GEN_TAG_TOKENS = 6
# A code line is ~4 characters per token.
APPROX_CHARS_PER_TOKEN = 4


def oracle_program(
    source: str,
    target: str,
    *,
    granularity: str = "line",
    objective: str = "coverage",
    tokenize: Tokenize | None = None,
    costs: CostModel = CostModel(),
) -> list[Op]:
    """The best program producing `target` from `source`.

    `resolve_program(result, source, source_tokens=tokenize(source) if token granularity)`
    equals `target` always. Line granularity emits `CopyLines`, token granularity `CopyTokens`;
    adjacent gens are merged. `tokenize` (text -> pieces concatenating to the text) counts
    tokens; without it a line is ~4 characters per token.
    Rejects (ValueError) an unknown granularity or objective, token granularity without
    `tokenize`, and a `tokenize` whose pieces are not strs concatenating to its input.
    """
    pricing = _Pricing(granularity, tokenize, costs, source, target)
    weights = _coverage_weights(pricing) if _objective(objective) == "coverage" else _cost_weights(pricing)
    target_ids, source_ids = _unit_ids(pricing.target_units, pricing.source_units)
    openings, longest_starts = _copy_openings(target_ids, source_ids)
    segments = _cheapest_cover(target_ids, source_ids, openings, weights, longest_starts)
    return _segments_to_ops(segments, pricing)


def program_cost(
    ops: Sequence[Op],
    source: str,
    target: str,
    *,
    granularity: str = "line",
    tokenize: Tokenize | None = None,
    costs: CostModel = CostModel(),
) -> float:
    """The estimated decode cost of `ops`, priced exactly as the "cost" objective prices it.

    Each run of adjacent gens counts as one gen (one tag pair). Rejects (ValueError) what
    `oracle_program` rejects, a copy of the other granularity or past the end of the source, and
    a program that does not produce `target` with every op starting and ending on a target
    unit boundary.
    """
    pricing = _Pricing(granularity, tokenize, costs, source, target)
    weights = _cost_weights(pricing)
    total = 0.0
    for start, end, first, last in _segments_of(ops, pricing):
        if first is None:
            total += weights.gen_run + sum(weights.gen_unit[start:end])
        else:
            assert last is not None  # a copy segment has both ends
            total += weights.open_copy(first) + sum(weights.copy_unit[start:end]) + weights.close_copy(last)
    return total


def _objective(objective: str) -> str:
    """Rejects an objective other than "coverage" or "cost"."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return objective


def _checked_pieces(tokenize: Tokenize, text: str, name: str) -> list[str]:
    """`tokenize(text)` as a list. Rejects non-str pieces and pieces not concatenating to `text`."""
    pieces = list(tokenize(text))
    if not all(isinstance(piece, str) for piece in pieces):
        raise ValueError(f"tokenize({name}) returned a piece that is not a str")
    if "".join(pieces) != text:
        raise ValueError(f"tokenize({name}) pieces do not concatenate to the {name}")
    return pieces


class _Pricing:
    """Units of both texts and the token counts the costs are made of.

    Rejects an unknown granularity, token granularity without `tokenize`, and a bad `tokenize`.
    """

    def __init__(
        self, granularity: str, tokenize: Tokenize | None, costs: CostModel, source: str, target: str
    ) -> None:
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
        if granularity == "token" and tokenize is None:
            raise ValueError("token granularity needs a tokenize callable")
        self.granularity = granularity
        self.costs = costs
        self.target = target
        if granularity == "token":
            assert tokenize is not None  # checked above
            self.source_units = _checked_pieces(tokenize, source, "source")
            self.target_units = _checked_pieces(tokenize, target, "target")
            self.unit_tokens = [1] * len(self.target_units)
        else:
            self.source_units = split_lines(source)
            self.target_units = split_lines(target)
            self.unit_tokens = _line_token_counts(self.target_units, tokenize)
        self.copy_op = CopyTokens if granularity == "token" else CopyLines
        self._tokenize = tokenize
        self.number_tokens = lru_cache(maxsize=None)(self._number_tokens)
        self.gen_tag_tokens = self._gen_tag_tokens()
        self.copy_tag_fixed_tokens = self._copy_tag_fixed_tokens()

    def _number_tokens(self, number: int) -> int:
        """Tokens of a copy-tag number; one per digit without a tokenizer."""
        if self._tokenize is None:
            return len(str(number))
        return len(self._tokenize(str(number)))

    def _gen_tag_tokens(self) -> int:
        """Tokens of `<gen>` plus `</gen>`."""
        if self._tokenize is None:
            return APPROX_GEN_TAG_TOKENS
        return len(self._tokenize(GEN_OPEN)) + len(self._tokenize(GEN_CLOSE))

    def _copy_tag_fixed_tokens(self) -> int:
        """Tokens of a copy tag other than its two numbers' (measured on the tag for 1-1)."""
        if self._tokenize is None:
            return APPROX_COPY_TAG_FIXED_TOKENS
        (tag,) = tag_text(self.copy_op(1, 1))
        return max(0, len(self._tokenize(tag)) - 2 * self.number_tokens(1))


def _line_token_counts(lines: list[str], tokenize: Tokenize | None) -> list[int]:
    """Tokens of each line, tokenizing each distinct line once; ~4 chars a token without one."""
    if tokenize is None:
        return [max(1, math.ceil(len(line) / APPROX_CHARS_PER_TOKEN)) for line in lines]
    counts: dict[str, int] = {}
    for line in lines:
        if line not in counts:
            counts[line] = len(tokenize(line))
    return [counts[line] for line in lines]


def _cost_weights(pricing: _Pricing) -> _Weights:
    """Estimated decode steps (see the module docstring for what is estimated)."""
    costs, tokens = pricing.costs, pricing.unit_tokens
    fixed_tag = pricing.copy_tag_fixed_tokens * costs.tag_token
    number_tokens = pricing.number_tokens

    def open_copy(first: int) -> float:
        return costs.copy_fixed + fixed_tag + number_tokens(first + 1) * costs.tag_token

    def close_copy(last: int) -> float:
        return number_tokens(last + 1) * costs.tag_token

    return _Weights(
        gen_unit=[count * costs.gen_token for count in tokens],
        copy_unit=[count * costs.copy_per_token for count in tokens],
        gen_run=pricing.gen_tag_tokens * costs.tag_token,
        open_copy=open_copy,
        close_copy=close_copy,
    )


def _coverage_weights(pricing: _Pricing) -> _Weights:
    """Uncopied tokens, then ops, as one integer: uncopied * (m + 1) + ops.

    A program has at most m ops (each covers a unit), so one uncopied token outweighs any
    number of ops: the lexicographic order (max coverage, then fewest ops) in one exact number.
    """
    per_token = len(pricing.target_units) + 1
    return _Weights(
        gen_unit=[count * per_token for count in pricing.unit_tokens],
        copy_unit=[0] * len(pricing.unit_tokens),
        gen_run=1,
        open_copy=lambda first: 1,
        close_copy=lambda last: 0,
    )


def _segments_to_ops(segments: list[_Segment], pricing: _Pricing) -> list[Op]:
    """Ops for `segments` (copy numbers are 1-based), adjacent gens merged."""
    ops: list[Op] = []
    for start, end, first, last in segments:
        if first is None:
            ops.extend(gen_ops("".join(pricing.target_units[start:end])))
        else:
            assert last is not None  # a copy segment has both ends
            ops.append(pricing.copy_op(first + 1, last + 1))
    return merge_gens(ops)


def _segments_of(ops: Sequence[Op], pricing: _Pricing) -> list[_Segment]:
    """The segments `ops` cover in the target, each run of adjacent gens as one segment.

    Rejects a copy of the other granularity or past the source's end, and ops that do not
    produce the target or do not start and end on target unit boundaries.
    """
    boundaries = [0]
    for unit in pricing.target_units:
        boundaries.append(boundaries[-1] + len(unit))
    segments: list[_Segment] = []
    offset = unit_index = 0
    for number, (text, first, last) in _emitted_pieces(ops, pricing):
        if not pricing.target.startswith(text, offset):
            raise ValueError(f"op {number} does not produce the target at char {offset}")
        offset += len(text)
        end_index = bisect_left(boundaries, offset)
        if end_index == len(boundaries) or boundaries[end_index] != offset:
            raise ValueError(f"op {number} ends inside a target {pricing.granularity} at char {offset}")
        if end_index > unit_index:
            segments.append((unit_index, end_index, first, last))
        unit_index = end_index
    if offset != len(pricing.target):
        raise ValueError(f"the program stops at char {offset} of a {len(pricing.target)}-char target")
    return segments


def _emitted_pieces(
    ops: Sequence[Op], pricing: _Pricing
) -> list[tuple[int, tuple[str, int | None, int | None]]]:
    """(1-based op number, (text, first, last)) per copy and per run of adjacent gens.

    A gen run is joined because a literal `</gen>` splits one gen in two mid-line.
    """
    pieces: list[tuple[int, tuple[str, int | None, int | None]]] = []
    for number, op in enumerate(ops, start=1):
        piece = _op_text(number, op, pricing)
        if isinstance(op, Gen) and pieces and pieces[-1][1][1] is None and isinstance(ops[number - 2], Gen):
            run_number, (run_text, _, _) = pieces[-1]
            pieces[-1] = (run_number, (run_text + piece[0], None, None))
        else:
            pieces.append((number, piece))
    return pieces


def _op_text(number: int, op: Op, pricing: _Pricing) -> tuple[str, int | None, int | None]:
    """What `op` emits and its 0-based source range. Rejects a wrong-granularity or too-long copy."""
    if isinstance(op, Gen):
        return op.text, None, None
    if type(op) is not pricing.copy_op:
        raise ValueError(f"op {number}: {type(op).__name__} at {pricing.granularity} granularity")
    if op.end > len(pricing.source_units):
        raise ValueError(f"op {number}: copy {op.start}-{op.end} past the source's end")
    return "".join(pricing.source_units[op.start - 1:op.end]), op.start - 1, op.end - 1
