"""`CostModel`: what the oracle's "cost" objective (`backend.core.oracle`) charges, in decode
steps, and its fit to measured prefill times (`CostModel.from_kernel`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields


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
