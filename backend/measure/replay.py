"""Reference replay through a model, measured: the one place that times it, judges it and pools it.

Reference replay forces a known target through the model with each strategy, one after another in
this process: copy-as-decode ("cad": the oracle program, gens forced token by token, each copy one
forward), plain decoding ("ar": one forced token per forward) and prompt-lookup decoding, at
transformers' defaults ("pld": 2-gram, 10 drafts) and tuned ("pld_tuned": the setting `bench` found
fastest on held-out commit edits, `prompt_lookup.TUNED_SETTING`, or the caller's): drafts accepted
while they match the target. A user would tune the peer, so the tuned run is the comparison that
matters; the defaults show what an untuned setup gets.

Definitions used by `python -m backend replay` and by the study alike:
- exact: the run reported no error and its output equals the target byte for byte (`is_exact`).
- wall seconds: after the prompt prefill (the three prompts differ; the prefill is reported apart
  as `prefill_seconds`, and `end_to_end_seconds` adds it back).
- speed-ups: `cad_vs_ar` = ar / cad, `pld_vs_ar` = ar / pld, `cad_vs_pld` = pld / cad (and the
  same with `pld_tuned`), on wall
  seconds. Pooled over cases (per corpus and across corpora) as ratios of SUMMED seconds over the
  cases every strategy timed, never as a mean or median of per-case ratios: a long case weighs what
  it costs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Protocol, Sequence

from backend.runtime.prompt_lookup import DEFAULT_LOOKUP, TUNED_LOOKUP

STRATEGIES = ("cad", "ar", "pld", "pld_tuned")  # the runs of one case, in this order
SPEEDUPS = {"cad_vs_ar": ("ar", "cad"), "pld_vs_ar": ("ar", "pld"), "cad_vs_pld": ("pld", "cad"),
            "pld_tuned_vs_ar": ("ar", "pld_tuned"), "cad_vs_pld_tuned": ("pld_tuned", "cad")}
DEFAULT_INSTRUCTION = "Apply the edit."
POOLED = "pooled"


class Judged(Protocol):
    output: str
    error: str | None


class Case(Protocol):
    id: str
    source: str
    target: str
    instruction: str | None


def is_exact(result: Judged, target: str) -> bool:
    """The one definition of exact: no error reported and the output equals the target byte for byte."""
    return result.error is None and result.output == target


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


# --- running -------------------------------------------------------------------------------------


def run_options(name: str, tuned: tuple[int, int] = TUNED_LOOKUP) -> dict[str, Any]:
    """The engine options of one named run: "pld_tuned" is strategy "pld" at the tuned setting."""
    if name == "pld_tuned":
        return {"strategy": "pld", "lookup": tuned}
    if name == "pld":
        return {"strategy": "pld", "lookup": DEFAULT_LOOKUP}
    return {"strategy": name}


def replay_once(engine: Any, case: Case, strategy: str, *, tuned: tuple[int, int] = TUNED_LOOKUP) -> dict[str, Any]:
    """Reference replay of one case with one run of STRATEGIES (an `EditEngine`): times, forwards,
    exactness, the metrics and, for cad, the program. Never raises: a failing run is a record with `error`."""
    started = time.perf_counter()
    try:
        # reference mode ignores max_new_tokens (the target fixes every token)
        result = engine.run_to_result(case.source, case.instruction or DEFAULT_INSTRUCTION, mode="reference",
                                      target=case.target, max_new_tokens=512, **run_options(strategy, tuned))
    except Exception as error:  # a runtime failure on one case is a result, not a crash of the run
        return {"error": f"{type(error).__name__}: {error}", "exact": False, "wall_seconds": None}
    total = time.perf_counter() - started
    metrics = result.metrics.to_dict()
    record = {
        "exact": is_exact(result, case.target),
        "wall_seconds": metrics.get("wall_seconds"),
        "prefill_seconds": metrics.get("prefill_seconds"),
        "forwards": metrics.get("forwards"),
        "total_seconds": total,
        "stop_reason": result.stop_reason,
        "error": result.error,
        "metrics": metrics,
    }
    if strategy == "cad":
        record["program"] = result.program
    return record


def replay_case(engine: Any, case: Case, *, tuned: tuple[int, int] = TUNED_LOOKUP) -> dict[str, Any]:
    """Reference replay of one case with cad, ar, pld and pld_tuned (in that order), with the case's
    own speed-ups. `tuned`: prompt lookup's (n-gram, drafts) for the pld_tuned run."""
    record: dict[str, Any] = {"id": case.id}
    for strategy in STRATEGIES:
        record[strategy] = replay_once(engine, case, strategy, tuned=tuned)
    record["speedup"] = {name: ratio(record[slow].get("wall_seconds"), record[fast].get("wall_seconds"))
                         for name, (slow, fast) in SPEEDUPS.items()}
    return record


def warm_up(engine: Any) -> None:
    """One short run per strategy before timing: first forwards are 4-10x slower (STACK.md)."""
    source = "def f(x):\n    return x + 1\n"
    target = "def f(x):\n    return x + 2\n"
    for strategy in STRATEGIES:
        engine.run_to_result(source, "Change 1 to 2.", mode="reference", target=target, max_new_tokens=64,
                             **run_options(strategy))


# --- pooling -------------------------------------------------------------------------------------


def _metric(run: dict[str, Any], key: str) -> int:
    return int((run.get("metrics") or {}).get(key) or 0)


def boundary_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Copy joins of the cad runs: boundary re-tokenisations per copy, jump-forward tokens (decode
    steps the grammar saved) and their share of the tag tokens."""
    runs = [r["cad"] for r in records if r["cad"].get("metrics")]
    copies = sum(_metric(run, "copies") for run in runs)
    retokenized = sum(_metric(run, "boundary_retokenized") for run in runs)
    jump = sum(_metric(run, "jump_forward_tokens") for run in runs)
    tags = sum(_metric(run, "tokens_tag") for run in runs)
    return {"cases": len(runs), "copies": copies, "boundary_retokenized": retokenized,
            "rate": ratio(retokenized, copies), "jump_forward_tokens": jump, "tag_tokens": tags,
            "jump_forward_share_of_tag_tokens": ratio(jump, tags),
            "forwards": sum(_metric(run, "forwards") for run in runs)}


def exact_counts(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per strategy: runs that were exact (`is_exact`) out of all replayed cases, timed or not."""
    return {s: {"ok": sum(bool(r[s].get("exact")) for r in records), "cases": len(records)} for s in STRATEGIES}


def summarize_replay(records: Sequence[dict[str, Any]], kernel: Any = None) -> dict[str, Any]:
    """Sums over the cases every strategy timed and the speed-ups they give (ratios of summed
    seconds). With no timed case: only the counts. With a kernel table (`step_seconds`,
    `prefill_seconds(n)`) and per-case `bound` records: the measured speed-up against the bound."""
    timed = [r for r in records if all(r[s].get("wall_seconds") is not None for s in STRATEGIES)]
    out: dict[str, Any] = {"cases": len(records), "timed_cases": len(timed)}
    if not timed:  # no speed-up keys at all: readers test for "speedup"
        return out
    for strategy in STRATEGIES:
        wall = sum(r[strategy]["wall_seconds"] for r in timed)
        prefill = sum(r[strategy].get("prefill_seconds") or 0.0 for r in timed)
        out[strategy] = {"wall_seconds": wall, "prefill_seconds": prefill, "end_to_end_seconds": wall + prefill,
                         "forwards": sum(r[strategy].get("forwards") or 0 for r in timed),
                         "exact": sum(bool(r[strategy].get("exact")) for r in timed)}
    for key, name in (("wall_seconds", "speedup"), ("end_to_end_seconds", "speedup_end_to_end")):
        out[name] = {label: ratio(out[slow][key], out[fast][key]) for label, (slow, fast) in SPEEDUPS.items()}
    out["cad_faster_than_pld_cases"] = sum(r["cad"]["wall_seconds"] < r["pld"]["wall_seconds"] for r in timed)
    out["cad_faster_than_pld_tuned_cases"] = sum(r["cad"]["wall_seconds"] < r["pld_tuned"]["wall_seconds"] for r in timed)
    if any("gold_tokens" in r for r in timed):
        out["gold_tokens"] = sum(r.get("gold_tokens", 0) for r in timed)
    bounded = [r for r in timed if r.get("bound")]
    if kernel is not None and bounded:
        out["vs_bound"] = vs_bound(bounded, kernel)
    return out


def vs_bound(cases: Sequence[dict[str, Any]], kernel: Any) -> dict[str, Any]:
    """Measured cad/ar speed-up against the closed-form bound of the same programs, and where the
    difference comes from (each term measured or counted, none assumed)."""
    plain = sum(c["bound"]["plain_seconds"] for c in cases)
    copy = sum(c["bound"]["copy_seconds"] for c in cases)
    measured_cad = sum(c["cad"]["wall_seconds"] for c in cases)
    measured_ar = sum(c["ar"]["wall_seconds"] for c in cases)
    bound_speedup, measured_speedup = ratio(plain, copy), ratio(measured_ar, measured_cad)
    step = kernel.step_seconds
    gen = sum(c["bound"]["generated_tokens"] for c in cases)
    tag = sum(c["bound"]["tag_tokens"] for c in cases)
    spans = [n for c in cases for n in c["bound"]["copy_spans"]]
    cad_forwards = sum(c["cad"].get("forwards") or 0 for c in cases)
    ar_tokens = sum(c["gold_tokens"] for c in cases)

    def mean_prompt(strategy: str) -> float | None:
        values = [c[strategy].get("metrics", {}).get("prompt_tokens") for c in cases]
        present = [v for v in values if v is not None]
        return statistics.mean(present) if present else None

    return {
        "cases": len(cases), "kernel_context": getattr(kernel, "context", None),
        "ar_prompt_tokens_mean": mean_prompt("ar"), "cad_prompt_tokens_mean": mean_prompt("cad"),
        "gold_tokens_mean": ar_tokens / len(cases),
        "bound_plain_seconds": plain, "bound_copy_seconds": copy, "bound_speedup": bound_speedup,
        "measured_ar_seconds": measured_ar, "measured_cad_seconds": measured_cad,
        "measured_speedup": measured_speedup, "fraction_of_bound": ratio(measured_speedup, bound_speedup),
        "kernel_step_seconds": step,
        "measured_ar_seconds_per_token": ratio(measured_ar, ar_tokens),
        "ar_step_vs_kernel_step": ratio(ratio(measured_ar, ar_tokens), step),
        "predicted_cad_decode_seconds": (gen + tag) * step,
        "predicted_cad_copy_seconds": sum(kernel.prefill_seconds(max(1, n)) for n in spans),
        "cad_vs_predicted": ratio(measured_cad, copy), "ar_vs_predicted": ratio(measured_ar, plain),
        "generated_tokens": gen, "tag_tokens": tag, "copy_spans": len(spans),
        "cad_forwards": cad_forwards, "cad_seconds_per_forward": ratio(measured_cad, cad_forwards),
        "jump_forward_tokens": sum(_metric(c["cad"], "jump_forward_tokens") for c in cases),
        "boundary_retokenized": sum(_metric(c["cad"], "boundary_retokenized") for c in cases),
    }


def pool_by_corpus(records: Sequence[dict[str, Any]], summarize: Callable[[list[dict[str, Any]]], Any],
                   names: Sequence[str] | None = None) -> dict[str, Any]:
    """`summarize` of each corpus's records (records carry `corpus`; `names` default: first-seen
    order), then of all of them under "pooled"."""
    names = list(dict.fromkeys(r["corpus"] for r in records)) if names is None else list(names)
    summaries = {name: summarize([r for r in records if r["corpus"] == name]) for name in names}
    summaries[POOLED] = summarize(list(records))
    return summaries
