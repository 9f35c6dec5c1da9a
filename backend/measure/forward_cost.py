"""What one forward of n tokens costs on this machine, after a given number of tokens of context.

Every multi-token strategy (a copy, a prompt-lookup draft) and every decode step is one forward;
`bench` and the prompt-lookup tuning price forwards counted without the model by this model of
their cost, measured here:

    forward_cost_table   median seconds of one forward of n tokens (n in FORWARD_SIZES) after
                         `context` tokens of cache
    ForwardCost          seconds(n, context) from tables timed at one or more contexts: linear in
                         n between the timed sizes, linear in the context between the timed
                         contexts and extrapolated along the last two beyond them
    timed_contexts       which contexts a set of cases needs: its shortest prompt, the longest
                         context its replays reach, and the middle one (to check the linear model)
    linearity_check      the middle table predicted from the outer two, against its measurement

Why the context matters: on a CPU a decode step after 2,500 tokens costs ~1.6x one after 500
(attention reads every cached token), so a table timed at the mean prompt length under-prices
long replays (prompt lookup 4-gram/10 on 3 commit files: predicted 41.9 s, measured 57.5 s).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping, Sequence

FORWARD_SIZES = (1, 2, 4, 8, 16, 32, 64, 129, 512)  # tokens per forward timed for a table
MIN_CONTEXT_SPREAD = 128  # cases whose contexts differ by less are priced by one table


SMALL_FORWARD = 32  # forwards of at most this many tokens are timed SMALL_REPEATS times (they are cheap and noisy)
SMALL_REPEATS = 9


def forward_cost_table(loaded: Any, context: int, *, repeats: int = 3) -> dict[int, float]:
    """Median seconds of one forward of n tokens (n in FORWARD_SIZES) after `context` tokens, over
    `repeats` timings after one untimed (SMALL_REPEATS for the small forwards: a decode step's
    cost sets plain decoding's whole prediction, and one step varies by ~20% run to run).

    One token is timed as decoding runs it, steps that each advance the cache; larger forwards are
    appended and rolled back. Why: on llama.cpp a step after a rollback costs 10-25% more than an
    advancing one after 1,200-3,100 tokens (measured here), and pricing every plain step that way
    over-predicted plain decoding by ~20% on 3 commit files. A size whose cost per token spikes
    above both neighbours' (SPIKE) is timed `repeats` more times and priced by the median of all."""
    size = int(loaded.vocab_size)
    ids = [1000 + (i * 7919) % max(1, size - 1000) for i in range(context + max(FORWARD_SIZES) + SMALL_REPEATS + 1)]
    cache = loaded.new_cache()
    cache.append_span(ids[:context])
    samples = {n: _time_forwards(cache, ids, context, n, max(repeats, SMALL_REPEATS) if n <= SMALL_FORWARD else repeats)
               for n in FORWARD_SIZES}
    for n in _spikes({n: statistics.median(s) for n, s in samples.items()}):
        samples[n] += _time_forwards(cache, ids, context, n, repeats)
    return {n: statistics.median(s) for n, s in samples.items()}


SPIKE = 1.5  # a size costing this much more per token than both neighbouring sizes is re-timed


def _spikes(table: Mapping[int, float]) -> list[int]:
    """Sizes whose seconds per token exceed SPIKE x both neighbours' (one measured at 5,105 tokens
    of context: 129 tokens at 51 ms/token between 64 and 512 at 15; never seen twice)."""
    sizes = sorted(table)
    per_token = {n: table[n] / n for n in sizes}
    return [n for low, n, high in zip(sizes, sizes[1:], sizes[2:])
            if per_token[n] > SPIKE * max(per_token[low], per_token[high])]


def _time_forwards(cache: Any, ids: Sequence[int], context: int, n: int, repeats: int) -> list[float]:
    """`repeats` timings of one n-token forward after `context` tokens, after one untimed; the cache
    is left at `context` tokens."""
    samples = []
    for i in range(repeats + 1):
        started = time.perf_counter()
        if n == 1:
            cache.step(ids[context + i])
        else:
            cache.append_span_all(ids[context:context + n])
        samples.append(time.perf_counter() - started)
        if n != 1:
            cache.rollback(n)
    if n == 1:
        cache.rollback(repeats + 1)
    return samples[1:]


def interpolate(table: Mapping[int, float]) -> Callable[[int], float]:
    """Seconds of a forward of n tokens, linear between the timed sizes (proportional beyond the last)."""
    sizes = sorted(table)

    def seconds(n: int) -> float:
        for low, high in zip(sizes, sizes[1:]):
            if n <= high:
                share = (n - low) / (high - low) if n > low else 0.0
                return table[low] + share * (table[high] - table[low])
        return table[sizes[-1]] * n / sizes[-1]

    return seconds


class ForwardCost:
    """Seconds of one forward of `n` tokens after `context` tokens, from tables timed at contexts.

    Below the shortest timed context the shortest table holds (the cases' contexts start there);
    above the longest the cost grows along the last two tables' slope (attention over the cache
    grows linearly with it). One table: the context is ignored.
    """

    def __init__(self, tables: Mapping[int, Mapping[int, float]]) -> None:
        if not tables:
            raise ValueError("at least one forward-cost table is needed")
        self.tables = {int(context): dict(table) for context, table in sorted(tables.items())}
        self.contexts = sorted(self.tables)
        self._by_size = {context: interpolate(table) for context, table in self.tables.items()}

    def __call__(self, n: int, context: int) -> float:
        contexts = self.contexts
        if len(contexts) == 1 or context <= contexts[0]:
            return self._by_size[contexts[0]](n)
        low, high = next(((a, b) for a, b in zip(contexts, contexts[1:]) if context <= b), contexts[-2:])
        at_low, at_high = self._by_size[low](n), self._by_size[high](n)
        return at_low + (context - low) / (high - low) * (at_high - at_low)

    def to_dict(self) -> dict[str, Any]:
        return {str(context): {str(n): s for n, s in table.items()} for context, table in self.tables.items()}


def timed_contexts(shortest: int, longest: int, room: int) -> tuple[int, ...]:
    """The contexts to time for replays that start after `shortest` and reach `longest` tokens:
    both ends and the middle (the middle checks the linear model), or just the mean where they
    differ by less than MIN_CONTEXT_SPREAD. `room` caps a context so its largest forward fits."""
    cap = max(1, room - max(FORWARD_SIZES) - 1)
    low, high = min(max(1, shortest), cap), min(max(1, longest), cap)
    if high - low < MIN_CONTEXT_SPREAD:
        return ((low + high) // 2,)
    return (low, (low + high) // 2, high)


def measure(loaded: Any, contexts: Sequence[int], *, progress: Callable[[str], None] = lambda _: None) -> ForwardCost:
    """One table per context, timed here, as a ForwardCost."""
    tables = {}
    for context in contexts:
        progress(f"forward-cost table after {context} tokens")
        tables[context] = forward_cost_table(loaded, context)
    return ForwardCost(tables)


def linearity_check(cost: ForwardCost) -> dict[str, Any] | None:
    """With three contexts timed: the middle table predicted from the outer two, per size, as
    (predicted - measured) / measured; None with fewer. How far the linear-in-context model is off."""
    if len(cost.contexts) != 3:
        return None
    low, middle, high = cost.contexts
    outer = ForwardCost({low: cost.tables[low], high: cost.tables[high]})
    errors = {n: (outer(n, middle) - seconds) / seconds for n, seconds in cost.tables[middle].items() if seconds > 0}
    return {"context": middle, "relative_error": {str(n): e for n, e in errors.items()},
            "median_abs_error": statistics.median(abs(e) for e in errors.values()) if errors else None}
