"""Perturbation study: how fragile are line-copy programs to off-by-one line numbers?

Each `<copy lines="i-j"/>` of an oracle program has its start and its end shifted, independently, by one
line with probability `rate` each (direction +1 or -1 with equal probability). The result is then resolved
and compared with the target (exact match, byte for byte).

Validity rule (a shifted range is always valid): each end is clamped into 1..n (n = source lines), so a
shift past the file's edge leaves that end where it was; if the start then lies after the end (only
possible for a one-line span), the end is moved to the start (the span keeps one line, now shifted).

Determinism and coupling: the random draws for a case depend only on (seed, case id), four per copy span
(start draw, start direction, end draw, end direction), consumed whatever the rate. A boundary moves
when its draw is < rate, so the spans perturbed at a lower rate are a subset of those at a higher rate,
and rate 0 changes nothing (100% exact by construction).
Gens and CopyTokens ops are left as they are.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Sequence

from backend.core.lines import split_lines
from backend.core.program import CopyLines, Op
from backend.core.resolve import resolve_program

DEFAULT_RATES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
DEFAULT_SEED = 0


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def perturb_program(ops: Sequence[Op], line_count: int, rate: float, rng: random.Random) -> tuple[list[Op], int]:
    """`ops` with each CopyLines boundary shifted by +-1 with probability `rate`; returns (ops, boundaries moved).

    Consumes exactly four draws of `rng` per CopyLines op. Raises ValueError for a rate outside [0, 1] or a
    copy beyond `line_count`.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be in [0, 1], got {rate!r}")
    result: list[Op] = []
    moved = 0
    for op in ops:
        if not isinstance(op, CopyLines):
            result.append(op)
            continue
        if op.end > line_count:
            raise ValueError(f"copy lines {op.start}-{op.end} but the source has {line_count} lines")
        start_draw, start_dir, end_draw, end_dir = rng.random(), rng.random(), rng.random(), rng.random()
        start, end = op.start, op.end
        if start_draw < rate:
            start = _clamp(start + (1 if start_dir < 0.5 else -1), 1, line_count)
        if end_draw < rate:
            end = _clamp(end + (1 if end_dir < 0.5 else -1), 1, line_count)
        if start > end:
            end = start
        moved += (start != op.start) + (end != op.end)
        result.append(CopyLines(start, end))
    return result, moved


def case_rng(seed: int, case_id: str) -> random.Random:
    """The RNG of one case: the same draws at every rate (see the module docstring)."""
    return random.Random(f"perturb:{seed}:{case_id}")


@dataclass(frozen=True)
class PerturbedCase:
    case_id: str
    rate: float
    exact: bool
    boundaries_moved: int


def perturb_case(case_id: str, source: str, target: str, ops: Sequence[Op], rate: float, *, seed: int = DEFAULT_SEED) -> PerturbedCase:
    """Perturb one program at one rate, resolve it, compare with the target."""
    perturbed, moved = perturb_program(ops, len(split_lines(source)), rate, case_rng(seed, case_id))
    return PerturbedCase(case_id, rate, resolve_program(perturbed, source) == target, moved)


@dataclass(frozen=True)
class RateResult:
    rate: float
    cases: int
    exact: int
    perturbed_programs: int  # programs with at least one boundary actually moved

    @property
    def exact_rate(self) -> float | None:
        return self.exact / self.cases if self.cases else None

    def to_dict(self) -> dict:
        return {"rate": self.rate, "cases": self.cases, "exact": self.exact,
                "exact_rate": self.exact_rate, "perturbed_programs": self.perturbed_programs}


def perturbation_study(
    programs: Iterable[tuple[str, str, str, Sequence[Op]]],
    rates: Sequence[float] = DEFAULT_RATES,
    *,
    seed: int = DEFAULT_SEED,
) -> list[RateResult]:
    """Exact-match counts per rate over `programs` = (case id, source, target, line ops) tuples."""
    items = list(programs)
    results = []
    for rate in rates:
        outcomes = [perturb_case(case_id, source, target, ops, rate, seed=seed) for case_id, source, target, ops in items]
        results.append(RateResult(rate, len(outcomes), sum(o.exact for o in outcomes),
                                  sum(o.boundaries_moved > 0 for o in outcomes)))
    return results
