"""The oracle: exact round trips, optimal programs under both objectives, and the cost model."""

import inspect
import math
import re
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.core import cover as oracle_module  # the oracle's pruning constants live in its cover algorithm
from backend.core.cost_model import CostModel
from backend.core.lines import split_lines
from backend.core.oracle import oracle_program, program_cost
from backend.core.program import CopyLines, CopyTokens, Gen, gen_ops
from backend.core.resolve import resolve_program


def word_tokenize(text):
    """A test tokenizer: words, whitespace runs, then single characters."""
    return re.findall(r"\w+|\s+|.", text, re.S)


def digit_tokenize(text):
    """Like word_tokenize but one token per digit, as Qwen2.5 and SmolLM2 do."""
    return re.findall(r"\d|[^\W\d]+|\s+|.", text, re.S)


def resolve(ops, source, granularity, tokenize=word_tokenize):
    tokens = tokenize(source) if granularity == "token" else None
    return resolve_program(ops, source, source_tokens=tokens)


def oracle(source, target, granularity, objective="coverage", **options):
    tokenize = options.pop("tokenize", word_tokenize if granularity == "token" else None)
    return oracle_program(
        source, target, granularity=granularity, objective=objective, tokenize=tokenize, **options
    )


def approx_line_tokens(line):
    return max(1, math.ceil(len(line) / 4))


def copied_units(ops, source, granularity):
    """Target tokens a program copies: copied lines' approximate tokens, or copied tokens."""
    if granularity == "token":
        return sum(op.end - op.start + 1 for op in ops if isinstance(op, CopyTokens))
    lines = split_lines(source)
    copies = [op for op in ops if isinstance(op, CopyLines)]
    return sum(approx_line_tokens(line) for op in copies for line in lines[op.start - 1:op.end])


def op_count(ops):
    """Copies plus maximal gen runs (a literal </gen> splits a gen but is one gen to the oracle)."""
    kinds = [isinstance(op, Gen) for op in ops]
    gen_runs = sum(1 for index, is_gen in enumerate(kinds) if is_gen and (index == 0 or not kinds[index - 1]))
    return gen_runs + kinds.count(False)


# --- strategies: arbitrary Unicode, mixed endings, tag look-alikes, shared lines -------------

FRAGMENTS = [
    "\n", "\r\n", "\r", "</gen>", "<gen>", '<copy lines="1-2"/>', "</", "gen>",
    "a", "b", " ", "x = 1", "\u2028", "\x85",
]
free_texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=10).map("".join)
LINE_POOL = [
    "\n", "\r\n", "\r", "a\n", "b\r\n", "a\r", "    return x\n", "</gen>\n", "é\u2028\n", "}\n", "a", "b",
]
pooled_texts = st.lists(st.sampled_from(LINE_POOL), max_size=12).map("".join)


@st.composite
def related_pairs(draw):
    """A source and a target made of new text and slices of the source (so copies pay off)."""
    source = draw(free_texts | pooled_texts)
    slices = st.tuples(st.integers(0, len(source)), st.integers(0, len(source)))
    parts = draw(st.lists(free_texts | pooled_texts | slices, max_size=6))
    target = "".join(part if isinstance(part, str) else source[min(part):max(part)] for part in parts)
    return source, target


pairs = related_pairs() | st.tuples(free_texts, free_texts) | st.tuples(pooled_texts, pooled_texts)


@pytest.mark.parametrize("objective", ["coverage", "cost"])
@pytest.mark.parametrize("granularity", ["line", "token"])
@settings(max_examples=250, deadline=None)
@given(pairs)
def test_resolve_of_oracle_is_the_target(granularity, objective, pair):
    source, target = pair
    ops = oracle(source, target, granularity, objective)
    assert resolve(ops, source, granularity) == target
    for before, after in zip(ops, ops[1:]):
        if isinstance(before, Gen) and isinstance(after, Gen):  # only where a literal </gen> was cut
            assert before.text.endswith("</") and after.text.startswith("gen>")


@pytest.mark.parametrize("granularity", ["line", "token"])
@settings(max_examples=200, deadline=None)
@given(pairs)
def test_cost_objective_costs_no_more_than_coverage_or_all_gen(granularity, pair):
    source, target = pair
    tokenize = word_tokenize if granularity == "token" else None

    def cost_of(ops):
        return program_cost(ops, source, target, granularity=granularity, tokenize=tokenize)

    cheapest = cost_of(oracle(source, target, granularity, "cost"))
    assert cheapest <= cost_of(oracle(source, target, granularity, "coverage")) + 1e-9
    assert cheapest <= cost_of(gen_ops(target)) + 1e-9


def pruned(rare_occurrences, max_open_copies=oracle_module.MAX_OPEN_COPIES):
    """Force the pruned openings whatever the input's size."""
    return mock.patch.multiple(
        oracle_module,
        EXACT_PAIR_BUDGET=0,
        RARE_UNIT_OCCURRENCES=rare_occurrences,
        MAX_OPEN_COPIES=max_open_copies,
    )


@pytest.mark.parametrize("rare_occurrences", [0, 2])
@pytest.mark.parametrize("granularity", ["line", "token"])
@settings(max_examples=150, deadline=None)
@given(pairs)
def test_pruned_openings_keep_the_coverage_optimum(granularity, rare_occurrences, pair):
    """Openings pruned to the longest match (for units seen more than `rare_occurrences` times)
    and dominated open copies dropped: coverage and op count are unchanged."""
    source, target = pair
    exact = oracle(source, target, granularity)
    with pruned(rare_occurrences):
        cut = oracle(source, target, granularity)
    assert resolve(cut, source, granularity) == target
    assert copied_units(cut, source, granularity) == copied_units(exact, source, granularity)
    assert op_count(cut) == op_count(exact)


@pytest.mark.parametrize("objective", ["coverage", "cost"])
@settings(max_examples=100, deadline=None)
@given(pairs)
def test_capping_open_copies_keeps_the_round_trip(objective, pair):
    source, target = pair
    with pruned(rare_occurrences=2, max_open_copies=1):
        ops = oracle(source, target, "token", objective)
    assert resolve(ops, source, "token") == target


def test_periodic_text_stays_fast_and_exact():
    """A periodic source copied into a longer periodic target: without dropping dominated open
    copies, one stays open per position (quadratic). 16k target tokens."""
    source, target = "a b " * 2000, "a b " * 4000
    for objective in ("coverage", "cost"):
        ops = oracle(source, target, "token", objective)
        assert ops == [CopyTokens(1, 8000), CopyTokens(1, 8000)]


# --- optimality against a brute force over every segmentation (line granularity) -------------

def brute_force_best(source, target, objective, costs):
    """Least cost over all programs: every segmentation into gens and copies from any source start."""
    source_lines, target_lines = split_lines(source), split_lines(target)
    tokens = [approx_line_tokens(line) for line in target_lines]

    def gen_price(start, end):
        if objective == "coverage":
            return (sum(tokens[start:end]), 1)
        return sum(tokens[start:end]) * costs.gen_token + 6 * costs.tag_token

    def copy_price(first, start, end):
        if objective == "coverage":
            return (0, 1)
        digits = len(str(first + 1)) + len(str(first + end - start))
        tag = 6 + digits
        return costs.copy_fixed + costs.copy_per_token * sum(tokens[start:end]) + tag * costs.tag_token

    def add(a, b):
        return tuple(x + y for x, y in zip(a, b)) if objective == "coverage" else a + b

    zero = (0, 0) if objective == "coverage" else 0.0
    best = {(0, False): zero}  # (target position, last op was a gen) -> least cost
    for start in range(len(target_lines)):
        for after_gen in (False, True):
            if (start, after_gen) not in best:
                continue
            here = best[(start, after_gen)]
            for end in range(start + 1, len(target_lines) + 1):
                candidates = []
                if not after_gen:  # adjacent gens are one gen
                    candidates.append(((end, True), add(here, gen_price(start, end))))
                for first in range(len(source_lines) - (end - start) + 1):
                    if source_lines[first:first + end - start] == target_lines[start:end]:
                        candidates.append(((end, False), add(here, copy_price(first, start, end))))
                for state, price in candidates:
                    if state not in best or price < best[state]:
                        best[state] = price
    return min(price for (position, _), price in best.items() if position == len(target_lines))


small_pooled_texts = st.lists(st.sampled_from(LINE_POOL), max_size=7).map("".join)
cost_models = st.builds(
    CostModel,
    gen_token=st.sampled_from([0.5, 1.0, 2.0]),
    tag_token=st.sampled_from([0.0, 1.0]),
    copy_fixed=st.sampled_from([0.0, 1.0, 5.0]),
    copy_per_token=st.sampled_from([0.0, 0.1, 3.0]),
)


@settings(max_examples=300, deadline=None)
@given(small_pooled_texts, small_pooled_texts, cost_models)
def test_oracle_matches_brute_force(source, target, costs):
    by_coverage = oracle(source, target, "line", "coverage")
    total_tokens = sum(approx_line_tokens(line) for line in split_lines(target))
    uncopied = total_tokens - copied_units(by_coverage, source, "line")
    assert (uncopied, op_count(by_coverage)) == brute_force_best(source, target, "coverage", costs)

    by_cost = oracle(source, target, "line", "cost", costs=costs)
    assert resolve(by_cost, source, "line") == target
    least = brute_force_best(source, target, "cost", costs)
    assert program_cost(by_cost, source, target, costs=costs) == pytest.approx(least)


# --- small exact cases -----------------------------------------------------------------------

source__target__objective__program = [
    ("a = 1\n\nb = 2\n", "x = 9\n\ny = 8\n", "coverage",
     [Gen("x = 9\n"), CopyLines(2, 2), Gen("y = 8\n")]),
    # A one-token blank line through a ~8-token tag (plus a second gen's tags) is a loss.
    ("a = 1\n\nb = 2\n", "x = 9\n\ny = 8\n", "cost", [Gen("x = 9\n\ny = 8\n")]),
    ("a\nb\nc\n", "a\nb\nc\n", "coverage", [CopyLines(1, 3)]),
    ("a\nb\nc\n", "c\na\nb\n", "coverage", [CopyLines(3, 3), CopyLines(1, 2)]),
    ("a\nb\n", "a\nb\na\nb\n", "coverage", [CopyLines(1, 2), CopyLines(1, 2)]),
    ("a\nb\n", "", "coverage", []),
    ("", "a\n", "coverage", [Gen("a\n")]),
    ("", "", "cost", []),
    ("a\r\nb", "a\nb", "coverage", [Gen("a\n"), CopyLines(2, 2)]),  # CRLF is not LF
    ("x\n", "</gen>\n", "coverage", [Gen("</"), Gen("gen>\n")]),
]


@pytest.mark.parametrize(
    ("source", "target", "objective", "program"), source__target__objective__program
)
def test_oracle_program_small_cases(source, target, objective, program):
    assert oracle(source, target, "line", objective) == program


LONG_LINES = "".join(f"    value_{index} = compute(value_{index - 1}, factor={index})\n" for index in range(1, 41))


def test_cost_objective_copies_a_long_run_as_one_copy():
    target = "# header\n" + LONG_LINES + "# footer\n"
    assert oracle(LONG_LINES, target, "line", "cost") == [Gen("# header\n"), CopyLines(1, 40), Gen("# footer\n")]


def test_expensive_copies_make_the_cost_objective_generate_everything():
    target = "# header\n" + LONG_LINES
    assert oracle(LONG_LINES, target, "line", "cost", costs=CostModel(copy_fixed=10**6)) == [Gen(target)]


@pytest.mark.parametrize("granularity", ["line", "token"])
def test_free_copies_make_the_cost_objective_copy_everything_it_can(granularity):
    source = LONG_LINES
    target = LONG_LINES.replace("factor=7)", "factor=70)").replace("value_30 =", "value_thirty =")
    free = CostModel(tag_token=0.0, copy_fixed=0.0)
    by_cost = oracle(source, target, granularity, "cost", costs=free)
    by_coverage = oracle(source, target, granularity, "coverage")
    assert copied_units(by_cost, source, granularity) == copied_units(by_coverage, source, granularity) > 0


def test_token_granularity_copies_around_a_changed_word():
    source = "def area(width, height):\n    return width * height\n"
    target = "def area(width, depth):\n    return width * depth\n"
    ops = oracle(source, target, "token")
    assert [op for op in ops if isinstance(op, Gen)] == [Gen("depth"), Gen("depth")]
    assert resolve(ops, source, "token") == target


# --- token counting ---------------------------------------------------------------------------

NUMBERED_SOURCE = "".join(f"line {index}\n" for index in range(1, 306))
LINES_12_TO_305 = "".join(split_lines(NUMBERED_SOURCE)[11:])

tokenize__copy_cost = [
    (None, 1.0 + 11),  # `<copy lines="12-305"/>`: 6 fixed + 5 digits, plus the copy's fixed cost
    (word_tokenize, 1.0 + len(word_tokenize('<copy lines="12-305"/>'))),
    (digit_tokenize, 1.0 + len(digit_tokenize('<copy lines="12-305"/>'))),
]


@pytest.mark.parametrize(("tokenize", "copy_cost"), tokenize__copy_cost)
def test_copy_tag_tokens_count_digits(tokenize, copy_cost):
    ops = [CopyLines(12, 305)]
    assert program_cost(ops, NUMBERED_SOURCE, LINES_12_TO_305, tokenize=tokenize) == copy_cost


def test_digit_tokenize_counts_the_example_tag_as_fifteen_tokens():
    # Guards the table above: a digit-splitting tokenizer does make the digits cost more.
    assert len(digit_tokenize('<copy lines="12-305"/>')) == len(word_tokenize('<copy lines="12-305"/>')) + 3


tokenize__gen_cost = [
    (None, 2 + 1 + 6),  # "ab cd\n" is 6 chars = 2 tokens, "ef\n" 1 token, <gen></gen> 6
    (word_tokenize, 4 + 2 + 3 + 4),  # ab,' ',cd,\n + ef,\n + <,gen,> + <,/,gen,>
]


@pytest.mark.parametrize(("tokenize", "gen_cost"), tokenize__gen_cost)
def test_gen_costs_its_line_tokens_and_tags(tokenize, gen_cost):
    assert program_cost([Gen("ab cd\nef\n")], "", "ab cd\nef\n", tokenize=tokenize) == gen_cost


def test_copy_per_token_prices_the_copied_tokens():
    costs = CostModel(copy_fixed=2.0, copy_per_token=0.5, tag_token=0.0)
    ops = [CopyLines(12, 305)]
    tokens = sum(len(word_tokenize(line)) for line in split_lines(LINES_12_TO_305))
    cost = program_cost(ops, NUMBERED_SOURCE, LINES_12_TO_305, tokenize=word_tokenize, costs=costs)
    assert cost == pytest.approx(2.0 + 0.5 * tokens)


# --- rejected inputs --------------------------------------------------------------------------

options__message = [
    ({"granularity": "char"}, "granularity must be one of"),
    ({"objective": "speed"}, "objective must be one of"),
    ({"granularity": "token"}, "needs a tokenize callable"),
    ({"granularity": "token", "tokenize": lambda text: text.split()}, "do not concatenate"),
    ({"granularity": "token", "tokenize": lambda text: [text.encode()]}, "not a str"),
]


@pytest.mark.parametrize(("options", "message"), options__message)
def test_oracle_program_rejects(options, message):
    with pytest.raises(ValueError, match=message):
        oracle_program("a b\n", "a b\n", **options)


ops__target__message = [
    ([CopyTokens(1, 1)], "a\n", "CopyTokens at line granularity"),
    ([CopyLines(3, 3)], "a\n", "past the source's end"),
    ([Gen("b\n")], "a\n", "does not produce the target"),
    ([Gen("a")], "a\n", "ends inside a target line"),
    ([Gen("a\n")], "a\nb\n", "stops at char 2"),
]


@pytest.mark.parametrize(("ops", "target", "message"), ops__target__message)
def test_program_cost_rejects(ops, target, message):
    with pytest.raises(ValueError, match=message):
        program_cost(ops, "a\nb\n", target)


# --- the cost model ---------------------------------------------------------------------------

def test_from_kernel_recovers_an_affine_prefill_cost():
    step = 0.07
    rows = [(n, step * (2.0 + 0.05 * n)) for n in (8, 32, 128, 512)]
    costs = CostModel.from_kernel(step, rows)
    assert costs.copy_fixed == pytest.approx(2.0)
    assert costs.copy_per_token == pytest.approx(0.05)
    assert (costs.gen_token, costs.tag_token) == (1.0, 1.0)


def test_from_kernel_reads_kernel_table_rows():
    rows = [{"n": 8, "prefill_seconds": 0.2, "speedup": 3.0}, {"n": 16, "prefill_seconds": 0.3}]
    costs = CostModel.from_kernel(0.1, rows)
    assert (costs.copy_fixed, costs.copy_per_token) == (pytest.approx(1.0), pytest.approx(0.125))


step__rows__fixed__per_token = [
    (0.1, [(8, 0.5), (32, 0.4)], 4.5, 0.0),  # faster for longer spans: slope clamped, mean kept
    (1.0, [(1, 0.0), (2, 0.3), (3, 0.6)], 0.0, 2.4 / 14),  # negative intercept: through the origin
]


@pytest.mark.parametrize(("step", "rows", "fixed", "per_token"), step__rows__fixed__per_token)
def test_from_kernel_never_fits_negative_costs(step, rows, fixed, per_token):
    costs = CostModel.from_kernel(step, rows)
    assert (costs.copy_fixed, costs.copy_per_token) == (pytest.approx(fixed), pytest.approx(per_token))


step__rows__message = [
    (0.0, [(8, 0.1), (16, 0.2)], "step_seconds must be > 0"),
    (0.1, [(8, 0.1)], "two or more distinct"),
    (0.1, [(8, 0.1), (8, 0.2)], "two or more distinct"),
    (0.1, [(0, 0.1), (8, 0.2)], "integer >= 1"),
    (0.1, [(8, -0.1), (16, 0.2)], "finite and >= 0"),
]


@pytest.mark.parametrize(("step", "rows", "message"), step__rows__message)
def test_from_kernel_rejects(step, rows, message):
    with pytest.raises(ValueError, match=message):
        CostModel.from_kernel(step, rows)


@pytest.mark.parametrize("field", ["gen_token", "tag_token", "copy_fixed", "copy_per_token"])
@pytest.mark.parametrize("value", [-1.0, math.inf, math.nan])
def test_cost_model_rejects_invalid_values(field, value):
    with pytest.raises(ValueError, match=field):
        CostModel(**{field: value})


# --- a realistic 1500-line file ---------------------------------------------------------------

def edited_stdlib_file():
    """1500 real lines of Python (inspect.py) and a target with a few typical edits."""
    lines = split_lines(Path(inspect.__file__).read_text(encoding="utf-8"))[:1500]
    edited = list(lines)
    edited[1200] = "    # a changed comment that is nowhere in the source\n"
    edited.insert(900, "    new_statement_nowhere_in_source()\n")
    del edited[500:503]
    edited[100] = "QUITE_NEW_CONSTANT = 42\n"
    return "".join(lines), "".join(edited)


@pytest.mark.parametrize("objective", ["coverage", "cost"])
def test_realistic_file_at_line_granularity(objective):
    source, target = edited_stdlib_file()
    ops = oracle(source, target, "line", objective)
    assert resolve(ops, source, "line") == target
    assert ops == [
        CopyLines(1, 100),
        Gen("QUITE_NEW_CONSTANT = 42\n"),
        CopyLines(102, 500),
        CopyLines(504, 900),
        Gen("    new_statement_nowhere_in_source()\n"),
        CopyLines(901, 1200),
        Gen("    # a changed comment that is nowhere in the source\n"),
        CopyLines(1202, 1500),
    ]


objective__generated = [
    # The ceiling copies even single tokens (" = ", "# a") found anywhere in the file.
    ("coverage", ["QUITE_NEW_CONSTANT", "42", "new_statement_nowhere_in_source", "changed", "nowhere"]),
    # The cheapest program generates each edited line whole rather than pay tags for scraps.
    ("cost", [
        "\nQUITE_NEW_CONSTANT = 42",
        "\n    new_statement_nowhere_in_source()",
        "\n    # a changed comment that is nowhere in the source",
    ]),
]


@pytest.mark.parametrize(("objective", "generated"), objective__generated)
def test_realistic_file_at_token_granularity(objective, generated):
    source, target = edited_stdlib_file()
    assert len(word_tokenize(source)) > 15_000
    ops = oracle(source, target, "token", objective)
    assert resolve(ops, source, "token") == target
    assert [op.text for op in ops if isinstance(op, Gen)] == generated
