"""The study's orchestrator: runs the stages in order on this machine and writes one results document
(results.json), its figures and report.md.

Stages (each timed; `results["stages"][name]["seconds"]`), one module each in backend/study/stages/:
    kernel        one-forward copy of N tokens vs N decode steps, per kernel model
    ceiling       copy ceiling (coverage programs), line and token granularity, per tokenizer and corpus
    roundtrip     every oracle program rendered, parsed and resolved back to the target (text path)
    bound         closed-form wall-clock bound from each kernel table and each corpus's cost programs
    perturbation  exact match under +-1-line span noise at several rates (line coverage programs)
    replay        measured wall clock of reference replay, cad vs ar vs pld, same cases, same model
    runtimes      the replay's cases again on llama.cpp, beside PyTorch, against the fastest plain decoding
    model_mode    the model writing programs itself (no reference): validity and exact match
Derived (no extra run): losslessness through the model, boundary re-tokenisation and jump-forward
(from the replayed cad runs), measured vs bound (from the replayed programs and the model's kernel).

Corpora: humanevalpack-python, humanevalpack-js, commits, stdlib-probe, and "pooled" (sums over all).
Every number is computed by backend.measure (pooled speed-ups are ratios of summed times, never means
of ratios); the stages only choose the cases and record.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from backend.study.config import RESULTS_KIND, Log, StudyConfig, StudyError, stderr_log
from backend.study.context import StudyContext
from backend.study.stages import bound, ceiling, derived, kernel, model_mode, perturbation, replay, runtimes


def run_stages(config: StudyConfig, *, log: Log = stderr_log) -> dict[str, Any]:
    """Every stage in order (only the kernel with `kernel_only`); returns the results document."""
    from backend.measure.machine import machine_info

    ctx = StudyContext(config, log=log)
    started = time.perf_counter()
    ctx.results.update(config=asdict(config), command=config.command, quick=config.quick, machine=machine_info(),
                       model={"name": config.model, "vocabulary": ctx.model_vocabulary})
    kernel.run(ctx)
    if not config.kernel_only:
        ctx.load_corpora()
        for stage in (ceiling, bound, perturbation, replay, runtimes, model_mode):
            stage.run(ctx)
        derived.losslessness(ctx)
        derived.boundary(ctx)
    ctx.results["duration_seconds"] = time.perf_counter() - started  # run_study adds the figures' time
    return ctx.results


def merge_into(results: dict[str, Any], extra_kernels: Sequence[str], *, log: Log = stderr_log) -> dict[str, Any]:
    """Merge extra kernel tables into an earlier run's results: add them to the kernel section and, when
    that run had corpora, compute their bounds (corpora, limits and data directory as in that run)."""
    if results.get("kind") != RESULTS_KIND:
        raise StudyError("--from-results: not a study results.json")
    ctx = StudyContext(StudyConfig.from_results(dict(results.get("config", {}))), log=log)
    ctx.results = results
    ctx.kernel_tables = results.setdefault("kernel", {"tables": []})["tables"]
    seen = {json.dumps(t.get("rows"), sort_keys=True) for t in ctx.kernel_tables}
    new = []
    for path in extra_kernels:
        for table in kernel.read_kernel_tables(path):
            if json.dumps(table.get("rows"), sort_keys=True) in seen:
                continue  # merged before
            table["origin"] = f"merged from {path}"
            new.append(kernel.annotate_kernel(table))
    ctx.kernel_tables.extend(new)
    if new and "bound" in results:
        started = time.perf_counter()
        ctx.load_corpora()
        bound.run(ctx, new, stage="bound_merged")
        log(f"[study] merged {len(new)} kernel table(s) in {time.perf_counter() - started:.1f} s")
    results["merged_kernels"] = list(results.get("merged_kernels", [])) + list(extra_kernels)
    return results


def rounded(value: Any, digits: int = 6) -> Any:
    """Floats rounded for a readable results.json (6 significant digits); containers recursively."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def write_outputs(results: dict[str, Any], out: Path, *, png: bool, log: Log = stderr_log,
                  count_in_duration: bool = False) -> dict[str, Any]:
    """Figures, results.json and report.md from a results document (`count_in_duration`: add the
    figures' time to the run's duration)."""
    from backend.study.figures import write_figures
    from backend.study.report import write_report

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results["figures"] = write_figures(results, out / "figures", png=png, log=log)
    results.setdefault("stages", {})["figures"] = {"seconds": time.perf_counter() - t0}
    if count_in_duration:
        results["duration_seconds"] = results.get("duration_seconds", 0.0) + results["stages"]["figures"]["seconds"]
    results = rounded(results)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_report(results, out / "report.md")
    return results


def run_study(config: StudyConfig, *, log: Log = stderr_log) -> dict[str, Any]:
    """Run the study and write results.json, figures and report.md under `config.out`.

    Returns the results document (also written). Raises StudyError / CorpusError / ModelUnavailable
    with a message saying what is missing.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run_stages(config, log=log)
    return write_outputs(results, out, png=config.png, log=log, count_in_duration=True)
