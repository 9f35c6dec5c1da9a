"""The forward-cost model (backend/measure/forward_cost.py) and the context-priced bound."""

from __future__ import annotations

import pytest

from backend.core.oracle import oracle_program
from backend.measure import forward_cost as fc
from backend.measure.ceiling import bound, context_bound, program_stats


def _linear_table(context: int) -> dict[int, float]:
    """A made-up machine: a forward of n tokens after c tokens costs 1 + n * (1 + c / 100)."""
    return {n: 1.0 + n * (1.0 + context / 100) for n in (1, 2, 4, 8)}


def test_interpolate_in_tokens():
    cost = fc.interpolate({1: 1.0, 2: 1.5, 4: 2.0})
    assert cost(1) == 1.0 and cost(3) == pytest.approx(1.75) and cost(8) == pytest.approx(4.0)


def test_forward_cost_is_linear_in_the_context_between_and_beyond_the_timed_contexts():
    cost = fc.ForwardCost({100: _linear_table(100), 300: _linear_table(300), 200: _linear_table(200)})
    assert cost.contexts == [100, 200, 300]
    for context in (100, 150, 250, 300, 700):  # between the tables and extrapolated beyond the last two
        assert cost(4, context) == pytest.approx(1 + 4 * (1 + context / 100))
    assert cost(4, 10) == cost(4, 100)  # below the shortest timed context: its table holds
    single = fc.ForwardCost({500: {1: 2.0, 8: 4.0}})
    assert single(1, 10) == single(1, 5000) == 2.0 and single(8, 0) == 4.0
    assert set(cost.to_dict()) == {"100", "200", "300"} and cost.to_dict()["200"]["8"] == _linear_table(200)[8]
    with pytest.raises(ValueError, match="at least one"):
        fc.ForwardCost({})


def test_linearity_check_measures_how_far_the_middle_table_is_from_the_outer_two():
    exact = fc.ForwardCost({c: _linear_table(c) for c in (100, 200, 300)})
    check = fc.linearity_check(exact)
    assert check["context"] == 200 and check["median_abs_error"] == pytest.approx(0.0)
    bent = fc.ForwardCost({100: _linear_table(100), 200: {n: 2 * s for n, s in _linear_table(200).items()},
                           300: _linear_table(300)})
    # outer two predict the linear value; the measured middle is twice it: error -50% at every size
    assert fc.linearity_check(bent)["median_abs_error"] == pytest.approx(0.5)
    assert fc.linearity_check(fc.ForwardCost({100: _linear_table(100)})) is None


@pytest.mark.parametrize("shortest__longest__room__expected", [
    (400, 3000, 8192, (400, 1700, 3000)),
    (400, 450, 8192, (425,)),                  # too close to need more than one table
    (400, 9000, 8192, (400, 4039, 7679)),      # capped so the 512-token forward fits the context
    (0, 0, 8192, (1,)),
])
def test_timed_contexts(shortest__longest__room__expected):
    shortest, longest, room, expected = shortest__longest__room__expected
    assert fc.timed_contexts(shortest, longest, room) == expected


SOURCE = "".join(f"line {i} of the file\n" for i in range(1, 21))
TARGET = SOURCE.replace("line 10 of the file\n", "line ten, changed\n")


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"\s+|\w+|[^\w\s]", text)


def test_context_bound_equals_the_closed_form_when_the_context_costs_nothing():
    ops = oracle_program(SOURCE, TARGET, objective="cost", tokenize=_words)
    stats = program_stats(ops, SOURCE, TARGET, tokenize=_words)
    assert len(stats.op_tokens) == stats.ops and sum(n for _c, n, _t in stats.op_tokens) == stats.gold_tokens
    assert sum(t for _c, _n, t in stats.op_tokens) == stats.tag_tokens

    class Kernel:
        step_seconds = 1.0

        def prefill_seconds(self, n: int) -> float:
            return 1.0 + n / 10

    closed = bound([stats], Kernel())
    flat = context_bound(stats, plain_prompt=50, program_prompt=80, cost=lambda n, c: 1.0 if n == 1 else 1.0 + n / 10)
    assert flat.plain_seconds == pytest.approx(closed.plain_seconds)
    assert flat.copy_seconds == pytest.approx(closed.copy_seconds)


def test_context_bound_prices_each_forward_after_the_tokens_before_it():
    ops = oracle_program(SOURCE, TARGET, objective="cost", tokenize=_words)
    stats = program_stats(ops, SOURCE, TARGET, tokenize=_words)
    seen: list[tuple[int, int]] = []

    def cost(n: int, context: int) -> float:
        seen.append((n, context))
        return 0.001 * context

    priced = context_bound(stats, plain_prompt=50, program_prompt=80, cost=cost)
    gold = stats.gold_tokens
    # plain decoding: one step after 50, 51, ..., 50 + gold - 1 tokens
    assert priced.plain_seconds == pytest.approx(0.001 * sum(50 + i for i in range(gold)))
    program = seen[gold:]
    assert program[0] == (1, 80)  # the first tag token right after the numbered prompt
    # contexts never go back, and the program's forwards cover its tags and the whole target
    assert all(b[1] >= a[1] for a, b in zip(program, program[1:]))
    last_n, last_context = program[-1]
    assert last_context + last_n == 80 + stats.tag_tokens + gold


def test_a_size_whose_cost_per_token_spikes_is_found():
    table = {1: 0.03, 8: 0.14, 64: 0.96, 129: 6.55, 512: 7.95}  # measured after 5,105 tokens
    assert fc._spikes(table) == [129]
    assert fc._spikes({1: 0.03, 8: 0.14, 64: 0.96, 129: 1.9, 512: 7.95}) == []


def test_a_table_on_the_tiny_model_prices_every_size_and_leaves_the_cache_as_it_found_it(tiny_model):
    """forward_cost_table times advancing steps for one token and append + rollback for more."""
    lengths = []

    class Recording:
        def __getattr__(self, name):
            return getattr(tiny_model, name)

        def new_cache(self):
            cache = tiny_model.new_cache()
            lengths.append(cache)
            return cache

    table = fc.forward_cost_table(Recording(), 40, repeats=1)
    assert set(table) == set(fc.FORWARD_SIZES) and all(s > 0 for s in table.values())
    assert lengths[0].length == 40
