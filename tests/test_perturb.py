"""Perturbation: valid ranges always, nested across rates, rate 0 exact, rate 1 not."""

from __future__ import annotations

import random

import pytest

from backend.data.corpora import load_corpus
from backend.core.oracle import oracle_program
from backend.measure.perturb import case_rng, perturb_case, perturb_program, perturbation_study
from backend.core.program import CopyLines, Gen
from backend.tokenizers import load_tokenizer

OPS = [CopyLines(1, 1), Gen("x\n"), CopyLines(3, 7), CopyLines(9, 9), CopyLines(10, 10)]


def test_rate_zero_changes_nothing():
    ops, moved = perturb_program(OPS, 10, 0.0, random.Random(1))
    assert ops == OPS and moved == 0


def test_rate_one_moves_every_boundary_that_can_move():
    for seed in range(50):
        ops, moved = perturb_program(OPS, 10, 1.0, random.Random(seed))
        assert ops[1] == Gen("x\n")
        middle = ops[2]
        assert abs(middle.start - 3) == 1 and abs(middle.end - 7) == 1  # interior: always moved
        assert moved >= 2


@pytest.mark.parametrize("rate", [0.1, 0.5, 1.0])
def test_ranges_stay_valid(rate):
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randint(1, 6)
        start = rng.randint(1, n)
        end = rng.randint(start, n)
        (op,), _ = perturb_program([CopyLines(start, end)], n, rate, rng)
        assert 1 <= op.start <= op.end <= n
        assert abs(op.start - start) <= 1
        assert op.end - end in (-1, 0, 1) or (op.end == op.start and start == end)


def test_one_line_file_cannot_move():
    for seed in range(20):
        assert perturb_program([CopyLines(1, 1)], 1, 1.0, random.Random(seed)) == ([CopyLines(1, 1)], 0)


def test_four_draws_per_copy_whatever_the_rate():
    for rate in (0.0, 0.3, 1.0):
        rng = random.Random(5)
        perturb_program(OPS, 10, rate, rng)
        reference = random.Random(5)
        for _ in range(4 * 4):
            reference.random()
        assert rng.random() == reference.random()


def test_moves_at_a_lower_rate_are_a_subset_of_those_at_a_higher_rate():
    ops = [CopyLines(i, i + 1) for i in range(2, 40, 3)]
    low, _ = perturb_program(ops, 50, 0.2, case_rng(0, "c"))
    high, _ = perturb_program(ops, 50, 0.6, case_rng(0, "c"))
    for original, a, b in zip(ops, low, high):
        if a.start != original.start:
            assert b.start == a.start
        if a.end != original.end:
            assert b.end == a.end


def test_bad_rate_and_out_of_range_copy():
    with pytest.raises(ValueError, match="rate"):
        perturb_program(OPS, 10, 1.5, random.Random(0))
    with pytest.raises(ValueError, match="source has 5 lines"):
        perturb_program(OPS, 5, 0.5, random.Random(0))


def test_case_level_is_seeded():
    source = "".join(f"line {i}\n" for i in range(1, 11))
    target = source.replace("line 5\n", "LINE 5\n")
    ops = oracle_program(source, target, objective="coverage")
    first = [perturb_case("c", source, target, ops, 0.5, seed=s) for s in range(10)]
    assert first == [perturb_case("c", source, target, ops, 0.5, seed=s) for s in range(10)]
    assert perturb_case("c", source, target, ops, 0.0).exact


def test_humanevalpack_rate_zero_exact_rate_one_less():
    tokenize = load_tokenizer("qwen2.5")
    cases = load_corpus("humanevalpack-python")
    programs = [(c.id, c.source, c.target, oracle_program(c.source, c.target, objective="coverage", tokenize=tokenize))
                for c in cases]
    results = perturbation_study(programs, [0.0, 0.1, 1.0], seed=0)
    assert [r.cases for r in results] == [164, 164, 164]
    assert results[0].exact == 164 and results[0].perturbed_programs == 0
    assert results[0].exact >= results[1].exact >= results[2].exact
    assert results[2].exact < 164
    # every exact program at rate 1 is one where clamping left all boundaries in place, or shifts that
    # happened to reproduce the same text; no program with moved boundaries is counted twice
    assert results[2].exact >= 164 - results[2].perturbed_programs
