"""What prompt reuse (`EditEngine(reuse_prompt=True)`, the app's engine) saves on a second edit of a file.

For each case and prompt kind (the numbered copy-as-decode prompt, the plain prompt the baselines
read), three prefills of the case's prompt, `repeats` times:

    prime  a reuse engine reads the same file with another instruction (what the user asked first)
    warm   the reuse engine reads the case's own prompt: only the part after the shared beginning
    cold   a fresh cache reads the whole prompt (what `bench` and `evaluate` time)

Each run decodes one token after its prompt (model mode, `max_new_tokens=1`): the prefill is all it
measures. Seconds are medians per case summed over the cases; `kept_tokens` is how many prompt
positions the warm run found in the cache. Any strategy may reuse its own prompt (a llama.cpp server
does for every client): this prices the file's reading, not one strategy against another.
"""

from __future__ import annotations

import statistics
from typing import Any

FIRST_INSTRUCTION = "Read this file; the edit comes next."
PROMPT_KINDS = {"cad": "cad", "plain": "ar"}  # prompt kind -> a strategy that reads it


def measure_prompt_reuse(loaded: Any, cases: list[Any], *, repeats: int = 3) -> dict[str, Any]:
    """{"cad"|"plain": {"cold_seconds", "warm_seconds", "prompt_tokens", "kept_tokens", "cases"}}
    over `cases` (objects with source and instruction)."""
    from backend.runtime.engine import EditEngine

    cold_engine, warm_engine = EditEngine(loaded), EditEngine(loaded, reuse_prompt=True)
    out: dict[str, Any] = {}
    for kind, strategy in PROMPT_KINDS.items():
        totals = {"cold_seconds": 0.0, "warm_seconds": 0.0, "prompt_tokens": 0, "kept_tokens": 0, "cases": len(cases)}
        for case in cases:
            cold, warm, kept, prompt = [], [], 0, 0
            for _ in range(repeats):
                _prefill(warm_engine, case.source, FIRST_INSTRUCTION, strategy)
                metrics = _prefill(warm_engine, case.source, case.instruction, strategy)
                warm.append(metrics.prefill_seconds)
                kept, prompt = metrics.prompt_reused_tokens or 0, metrics.prompt_tokens
                cold.append(_prefill(cold_engine, case.source, case.instruction, strategy).prefill_seconds)
            totals["cold_seconds"] += statistics.median(cold)
            totals["warm_seconds"] += statistics.median(warm)
            totals["prompt_tokens"] += prompt
            totals["kept_tokens"] += kept
        out[kind] = totals
    return out


def _prefill(engine: Any, source: str, instruction: str | None, strategy: str) -> Any:
    return engine.run_to_result(source, instruction, strategy=strategy, max_new_tokens=1).metrics


def reuse_line(reuse: dict[str, Any]) -> str:
    """One line: cold vs warm prompt reading per prompt kind."""
    parts = []
    for kind, r in reuse.items():
        ratio = r["cold_seconds"] / r["warm_seconds"] if r["warm_seconds"] > 0 else float("inf")
        parts.append(f"{kind} prompt {r['cold_seconds']:.3g} s cold, {r['warm_seconds']:.3g} s on a second edit "
                     f"({r['kept_tokens']:,} of {r['prompt_tokens']:,} tokens kept, {ratio:.1f}x)")
    return "prompt reuse (a second edit of the same file): " + "; ".join(parts)
