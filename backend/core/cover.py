"""The oracle's cover algorithm (`backend.core.oracle`): the least-weight cover of a target by
copies of source runs and gens, over units as small ints and per-unit weights (no text, tokens
or tags here).

Both objectives are one exact dynamic program over target positions (see `_cheapest_cover`);
copies can only open where a target unit equals a source unit, so the work is proportional to
the number of such matching pairs. When those pairs are too many (frequent tokens at token
granularity), the openings at each position are pruned (`_copy_openings`) and dominated open
copies are dropped (`_drop_dominated_copies`). Neither changes the coverage optimum (short of
MAX_OPEN_COPIES cheaper copies open at once); under "cost" only a copy tag's digit tokens can
differ. The round trip stays exact whatever is pruned, because a gen can always cover.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


# A segment covers target units [start, end): a gen (first = last = None) or a copy of source
# units first..last (0-based, inclusive).
_Segment = tuple[int, int, "int | None", "int | None"]


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
