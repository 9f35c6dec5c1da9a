"""Kernel table: measured decode-step time and one-forward prefill time of an N-token span.

Format (JSON, written by `bench-kernel`, read by `ceiling --kernel`), see docs/DESIGN.md:

    {"kind": "kernel-table", "model": "...", "weights": "real|random (timing only)", "device": "cpu",
     "dtype": "float32", "context": 512, "step_seconds": 0.07,
     "rows": [{"n": 8, "prefill_seconds": 0.011, "steps_seconds": 0.56, "speedup": 50.9,
               "max_abs_logit_diff": 4e-5}]}

Required: `kind` == "kernel-table", `step_seconds` > 0, `rows` with at least one row of `n` >= 2;
each row needs an integer `n` >= 1 (unique) and `prefill_seconds` > 0. Other fields are kept as given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class KernelError(ValueError):
    """A kernel table file is missing or malformed; the message names the file and the field."""


@dataclass(frozen=True)
class KernelRow:
    n: int
    prefill_seconds: float
    steps_seconds: float | None = None
    speedup: float | None = None
    max_abs_logit_diff: float | None = None


@dataclass(frozen=True)
class KernelTable:
    step_seconds: float
    rows: tuple[KernelRow, ...]  # sorted by n
    model: str = ""
    weights: str = ""
    device: str = ""
    dtype: str = ""
    context: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def load(cls, path: str | Path) -> "KernelTable":
        """Read and validate a kernel table. Raises KernelError (missing file, bad JSON, bad field)."""
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except OSError as error:
            raise KernelError(f"{path}: cannot read kernel table ({error.strerror or error})") from None
        except UnicodeDecodeError as error:
            raise KernelError(f"{path}: not valid UTF-8 at byte {error.start}") from None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise KernelError(f"{path}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
        return cls.from_dict(document, origin=str(path))

    @classmethod
    def from_dict(cls, document: Any, *, origin: str = "kernel table") -> "KernelTable":
        """Validate a parsed kernel-table document. Raises KernelError naming `origin` and the field."""

        def fail(reason: str) -> KernelError:
            return KernelError(f"{origin}: {reason}")

        if not isinstance(document, dict):
            raise fail("expected a JSON object")
        if document.get("kind") != "kernel-table":
            raise fail(f"'kind' must be \"kernel-table\", got {document.get('kind')!r}")
        step = _positive(document.get("step_seconds"), "step_seconds", fail)
        raw_rows = document.get("rows")
        if not isinstance(raw_rows, list) or not raw_rows:
            raise fail("'rows' must be a non-empty list")
        rows: list[KernelRow] = []
        for index, row in enumerate(raw_rows):
            if not isinstance(row, dict):
                raise fail(f"rows[{index}] must be an object")
            n = row.get("n")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise fail(f"rows[{index}].n must be an integer >= 1, got {n!r}")
            prefill = _positive(row.get("prefill_seconds"), f"rows[{index}].prefill_seconds", fail)
            optional = {}
            for key in ("steps_seconds", "speedup", "max_abs_logit_diff"):
                value = row.get(key)
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    raise fail(f"rows[{index}].{key} must be a number, got {value!r}")
                optional[key] = None if value is None else float(value)
            rows.append(KernelRow(n, prefill, **optional))
        rows.sort(key=lambda r: r.n)
        if len({r.n for r in rows}) != len(rows):
            raise fail("rows repeat the same n")
        if rows[-1].n < 2:
            raise fail("rows need at least one n >= 2 (prefill time cannot be extrapolated from n = 1 alone)")
        context = document.get("context")
        known = {"kind", "step_seconds", "rows", "model", "weights", "device", "dtype", "context"}
        return cls(
            step_seconds=step,
            rows=tuple(rows),
            model=str(document.get("model", "")),
            weights=str(document.get("weights", "")),
            device=str(document.get("device", "")),
            dtype=str(document.get("dtype", "")),
            context=context if isinstance(context, int) and not isinstance(context, bool) else None,
            extra={k: v for k, v in document.items() if k not in known},
        )

    def points(self) -> list[tuple[int, float]]:
        """(n, seconds) knots: (1, step_seconds) unless a row measures n = 1, then every row."""
        knots = [(r.n, r.prefill_seconds) for r in self.rows]
        if knots[0][0] != 1:
            knots.insert(0, (1, self.step_seconds))
        return knots

    def prefill_seconds(self, n: int) -> float:
        """Time of one forward over an n-token span (n >= 1).

        Linear interpolation between knots (`points()`), linear extrapolation past the last row with the
        slope of the last two knots; never below 0. Raises ValueError for n < 1. Changes no state.
        """
        if n < 1:
            raise ValueError(f"prefill of {n} tokens: n must be >= 1")
        knots = self.points()
        for (n0, t0), (n1, t1) in zip(knots, knots[1:]):
            if n <= n1:
                return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
        (n0, t0), (n1, t1) = knots[-2], knots[-1]
        return max(0.0, t1 + (t1 - t0) * (n - n1) / (n1 - n0))

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            row: dict[str, Any] = {"n": r.n, "prefill_seconds": r.prefill_seconds}
            for key in ("steps_seconds", "speedup", "max_abs_logit_diff"):
                if getattr(r, key) is not None:
                    row[key] = getattr(r, key)
            rows.append(row)
        document = {"kind": "kernel-table", "model": self.model, "weights": self.weights, "device": self.device,
                    "dtype": self.dtype, "context": self.context, "step_seconds": self.step_seconds, "rows": rows}
        document.update(self.extra)
        return document


def _positive(value: Any, name: str, fail: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise fail(f"'{name}' must be a positive number, got {value!r}")
    return float(value)
