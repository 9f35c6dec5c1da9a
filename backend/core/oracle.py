"""The oracle: the best program turning a known source into a known target.

Units are lines (`split_lines`) at line granularity and tokenizer pieces at token granularity.
A copy covers a run of consecutive target units equal to consecutive source units (any source
range, any order, any number of times); a gen covers everything else. Two objectives:

- "coverage": copy as many target tokens as possible (the copy ceiling), then use fewest ops.
- "cost": least estimated decode cost under a `CostModel` (decode-step units): generated and tag
  tokens cost a step each; a copy costs one prefill of its span, `copy_fixed + copy_per_token*N`.

Both are one exact dynamic program over target positions (see `_cheapest_cover`); copies can
only open where a target unit equals a source unit, so the work is proportional to the number of
such matching pairs. When those pairs are too many (frequent tokens at token granularity), the
openings at each position are pruned (`_copy_openings`) and dominated open copies are dropped
(`_drop_dominated_copies`). Neither changes the coverage optimum (short of MAX_OPEN_COPIES
cheaper copies open at once); under "cost" only a copy tag's digit tokens can differ. The round
trip stays exact whatever is pruned, because a gen can always cover.

Costs are estimates: a gen's text is counted unit by unit (a tokenizer merges across line ends,
so the whole text can be a few tokens shorter), a copy tag is priced as a fixed part plus the
tokens of its two numbers, the optional newline after each item is not counted, and splitting a
gen around a literal `</gen>` (its extra tag pair) is not counted.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache

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

# Matching (target, source) unit pairs beyond which copy openings are pruned. Measured: 240k pairs
# (490 blank lines each side) take 0.67 s exact, ~2.7 µs a pair. The first 1500 lines of
# inspect.py against themselves: 3.4e4 line pairs (blank lines dominate), but 2.5e7 token pairs
# for its 17k regex tokens (" ", "\n", "(" ...), which the pruned path handles in ~0.1 s.
EXACT_PAIR_BUDGET = 100_000
# When pruning, a unit occurring at most this many times in the source still opens copies at
# every occurrence; a more frequent one opens only where the longest match starts.
RARE_UNIT_OCCURRENCES = 8
# When pruning, at most this many copies stay open at once (see _drop_dominated_copies).
MAX_OPEN_COPIES = 64


@dataclass(frozen=True)
class CostModel:
    """Decode cost in decode-step units (one greedy step = 1.0).

    A generated text token costs `gen_token`, a tag token `tag_token`; a copy span of N tokens
    costs `copy_fixed + copy_per_token * N` (its one prefill forward) plus its tag tokens.
    Rejects negative, infinite or NaN values.
    """

    gen_token: float = 1.0
    tag_token: float = 1.0
    copy_fixed: float = 1.0
    copy_per_token: float = 0.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"CostModel.{field.name} must be a finite number >= 0, got {value!r}")

    @classmethod
    def from_kernel(
        cls,
        step_seconds: float,
        rows: Sequence[tuple[int, float] | Mapping[str, float]],
        *,
        gen_token: float = 1.0,
        tag_token: float = 1.0,
    ) -> CostModel:
        """Fit `copy_fixed + copy_per_token * n` to measured prefill times, in decode steps.

        `rows` are `(n, prefill_seconds)` pairs or kernel-table rows (`{"n", "prefill_seconds"}`);
        the fit is least squares on `prefill_seconds / step_seconds`. A negative slope is
        clamped to 0 (then the intercept is the mean) and a negative intercept to 0 (then the
        line goes through the origin), because a copy never costs less than nothing.
        Rejects step_seconds <= 0, n < 1, negative times, and fewer than two distinct n.
        """
        if not step_seconds > 0:
            raise ValueError(f"step_seconds must be > 0, got {step_seconds!r}")
        points = [_kernel_point(row) for row in rows]
        if len({n for n, _ in points}) < 2:
            raise ValueError("need kernel rows at two or more distinct span lengths n to fit a line")
        xs = [float(n) for n, _ in points]
        ys = [seconds / step_seconds for _, seconds in points]
        fixed, per_token = _fit_nonnegative_line(xs, ys)
        return cls(gen_token=gen_token, tag_token=tag_token, copy_fixed=fixed, copy_per_token=per_token)


def _kernel_point(row: tuple[int, float] | Mapping[str, float]) -> tuple[int, float]:
    """`(n, prefill_seconds)` from a pair or a kernel-table row. Rejects n < 1 and negative times."""
    n, seconds = (row["n"], row["prefill_seconds"]) if isinstance(row, Mapping) else row
    if int(n) != n or n < 1:
        raise ValueError(f"kernel row n must be an integer >= 1, got {n!r}")
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"kernel row prefill_seconds must be finite and >= 0, got {seconds!r}")
    return int(n), float(seconds)


def _fit_nonnegative_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares `(intercept, slope)` of ys on xs, both clamped to >= 0. xs must vary."""
    count = len(xs)
    mean_x, mean_y = sum(xs) / count, sum(ys) / count
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx
    intercept = mean_y - slope * mean_x
    if slope < 0:
        return max(mean_y, 0.0), 0.0
    if intercept < 0:
        return 0.0, max(sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs), 0.0)
    return intercept, slope


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


@dataclass(frozen=True)
class _Weights:
    """What the dynamic program minimises, split so that it is Markov in the target position.

    `gen_unit[k]`/`copy_unit[k]`: covering target unit k inside a gen/copy; `gen_run`: one gen's
    tags; `open_copy(i)`/`close_copy(i)`: a copy whose first/last source unit is i (0-based).
    """

    gen_unit: list[float]
    copy_unit: list[float]
    gen_run: float
    open_copy: Callable[[int], float]
    close_copy: Callable[[int], float]


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


def _unit_ids(target_units: list[str], source_units: list[str]) -> tuple[list[int], list[int]]:
    """Both unit lists as small ints (equal units, equal ids), so comparisons are cheap."""
    ids: dict[str, int] = {}
    source_ids = [ids.setdefault(unit, len(ids)) for unit in source_units]
    target_ids = [ids.setdefault(unit, len(ids)) for unit in target_units]
    return target_ids, source_ids


def _copy_openings(
    target_ids: list[int], source_ids: list[int]
) -> tuple[list[Sequence[int]], list[int] | None]:
    """For each target position k, the source positions where a copy may open; and, when pruned,
    where the longest match of target[k:] starts (else None).

    Exact (every source position holding the same unit) while the matching pairs fit
    EXACT_PAIR_BUDGET. Beyond it, a unit occurring more than RARE_UNIT_OCCURRENCES times in the
    source opens only where the longest match of target[k:] starts. That loses no coverage: any
    copy of target[k:k+L] from elsewhere can be taken from the longest match's start instead,
    covering the same units; only the tag's digit count (a cost-objective detail) can differ.
    """
    occurrences: dict[int, list[int]] = defaultdict(list)
    for position, unit in enumerate(source_ids):
        occurrences[unit].append(position)
    empty: list[int] = []
    target_counts = Counter(target_ids)
    pairs = sum(count * len(occurrences.get(unit, empty)) for unit, count in target_counts.items())
    if pairs <= EXACT_PAIR_BUDGET:
        return [occurrences.get(unit, empty) for unit in target_ids], None
    longest_starts = _longest_match_starts(target_ids, source_ids)
    openings: list[Sequence[int]] = []
    for k, unit in enumerate(target_ids):
        positions = occurrences.get(unit, empty)
        openings.append(positions if len(positions) <= RARE_UNIT_OCCURRENCES else (longest_starts[k],))
    return openings, longest_starts


def _longest_match_starts(target_ids: list[int], source_ids: list[int]) -> list[int]:
    """For each k, a source start of the longest prefix of target[k:] occurring in source (-1: none).

    Matching statistics over a suffix automaton of the reversed source, walked with the reversed
    target: a prefix of target[k:] is a suffix of the reversed target read up to k. O(n + m).
    """
    reversed_source = source_ids[::-1]
    transitions, links, lengths, first_ends = _suffix_automaton(reversed_source)
    size = len(source_ids)
    starts = [-1] * len(target_ids)
    state, matched = 0, 0
    for offset, unit in enumerate(reversed(target_ids)):
        while state and unit not in transitions[state]:
            state = links[state]
            matched = lengths[state]
        if unit in transitions[state]:
            state = transitions[state][unit]
            matched += 1
        else:
            state, matched = 0, 0
        if matched:
            # The match ends at first_ends[state] in the reversed source; it starts there in source.
            starts[len(target_ids) - 1 - offset] = size - 1 - first_ends[state]
    return starts


def _suffix_automaton(sequence: list[int]) -> tuple[list[dict[int, int]], list[int], list[int], list[int]]:
    """The suffix automaton of `sequence`: transitions, suffix links, lengths, first end positions."""
    transitions: list[dict[int, int]] = [{}]
    links, lengths, first_ends = [-1], [0], [-1]
    last = 0
    for position, unit in enumerate(sequence):
        current = len(lengths)
        transitions.append({})
        links.append(0)
        lengths.append(lengths[last] + 1)
        first_ends.append(position)
        state = last
        while state != -1 and unit not in transitions[state]:
            transitions[state][unit] = current
            state = links[state]
        if state != -1:
            successor = transitions[state][unit]
            if lengths[state] + 1 == lengths[successor]:
                links[current] = successor
            else:
                clone = len(lengths)
                transitions.append(dict(transitions[successor]))
                links.append(links[successor])
                lengths.append(lengths[state] + 1)
                first_ends.append(first_ends[successor])
                while state != -1 and transitions[state].get(unit) == successor:
                    transitions[state][unit] = clone
                    state = links[state]
                links[successor] = links[current] = clone
        last = current
    return transitions, links, lengths, first_ends


# A segment covers target units [start, end): a gen (first = last = None) or a copy of source
# units first..last (0-based, inclusive).
_Segment = tuple[int, int, "int | None", "int | None"]


def _cheapest_cover(
    target_ids: list[int],
    source_ids: list[int],
    openings: list[Sequence[int]],
    weights: _Weights,
    longest_starts: list[int] | None = None,
) -> list[_Segment]:
    """Segments covering the target at least total weight: an exact dynamic program.

    States at target position k: `closed[k]` (between ops), the open gen, and one open copy per
    diagonal d = source position - target position (extended while units match). A gen opens
    from `closed[k]` and pays its tags once; a copy opens at `openings[k]` and pays the end
    number's tokens when it closes. Ties keep the longer op, so ops are few.
    With `longest_starts` (pruned openings), dominated open copies are dropped: see
    `_drop_dominated_copies`.
    """
    size_t, size_s = len(target_ids), len(source_ids)
    closed = [math.inf] * (size_t + 1)
    closed[0] = 0
    back: list[tuple[int, int | None]] = [(0, None)] * (size_t + 1)
    gen_cost, gen_start = math.inf, 0
    copies: dict[int, tuple[float, int]] = {}  # diagonal -> (cost so far, target start)
    gen_unit, copy_unit, gen_run = weights.gen_unit, weights.copy_unit, weights.gen_run
    open_copy, close_copy = weights.open_copy, weights.close_copy
    for k in range(size_t + 1):
        if k:
            best = gen_cost
            choice: tuple[int, int | None] = (gen_start, None)
            for diagonal, (cost, start) in copies.items():
                total = cost + close_copy(k - 1 + diagonal)
                if total < best:
                    best, choice = total, (start, diagonal)
            closed[k], back[k] = best, choice
        if k == size_t:
            break
        if closed[k] + gen_run < gen_cost:
            gen_cost, gen_start = closed[k] + gen_run, k
        gen_cost += gen_unit[k]
        unit, per_unit = target_ids[k], copy_unit[k]
        extended = {}
        for diagonal, (cost, start) in copies.items():
            position = k + diagonal
            if position < size_s and source_ids[position] == unit:
                extended[diagonal] = (cost + per_unit, start)
        for position in openings[k]:
            cost = closed[k] + open_copy(position) + per_unit
            previous = extended.get(position - k)
            if previous is None or cost < previous[0]:
                extended[position - k] = (cost, k)
        if longest_starts is not None and longest_starts[k] >= 0:
            extended = _drop_dominated_copies(extended, longest_starts[k] - k)
        copies = extended
    return _backtrack(back, size_t)


def _drop_dominated_copies(
    copies: dict[int, tuple[float, int]], longest: int
) -> dict[int, tuple[float, int]]:
    """`copies` without those no cheaper than the copy on the `longest` diagonal, and at most
    MAX_OPEN_COPIES of them.

    The longest-match diagonal's run reaches at least as far as any other open copy's (they all
    match target[k:] for their remaining length), so an open copy costing at least as much can
    be replaced by it at every later close: an exact cut for coverage; for cost only the end
    number's digit tokens can differ. Without it, periodic text (a source `a b a b ...` copied
    into a longer target of the same) keeps one open copy per position alive: quadratic, 0.7 s
    for 4000 source tokens, ~10 s for 15k. The cap bounds the pathological rest.
    """
    bound = copies[longest][0]
    kept = {diagonal: value for diagonal, value in copies.items() if value[0] < bound or diagonal == longest}
    if len(kept) <= MAX_OPEN_COPIES:
        return kept
    cheapest = sorted(kept.items(), key=lambda item: item[1][0])[:MAX_OPEN_COPIES - 1]
    return {longest: copies[longest], **dict(cheapest)}


def _backtrack(back: list[tuple[int, int | None]], end: int) -> list[_Segment]:
    """The segments of the best cover ending at `end`, in target order."""
    segments: list[_Segment] = []
    while end:
        start, diagonal = back[end]
        if diagonal is None:
            segments.append((start, end, None, None))
        else:
            segments.append((start, end, start + diagonal, end - 1 + diagonal))
        end = start
    segments.reverse()
    return segments


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
