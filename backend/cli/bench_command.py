"""`bench CORPUS... [--limit K] [--model M] [--runtime torch|llama.cpp] [--repeats R] [--top N] [--data-dir D]
       [--library-check K]`

Reference replay of each case's target through one model with every strategy, measured in this
process (backend/measure/strategy_bench.py says how): plain decoding (`ar`), prompt lookup at
transformers' defaults (`pld`, 2-gram/10), prompt lookup at the fastest setting of the n-gram 1-4 x
draft 10-128 sweep on these same cases (`pld-best`; the N best-predicted settings are timed),
copy-as-decode (`cad`) and, when the decoder offers it, hybrid copy-as-decode (`cad-hybrid`).
Seconds are decode seconds after the prompt prefill, medians of R runs per case summed over the
cases; ratios are ratios of those sums, measured in the same run. The machine's load average at
start and end is printed: timings on a busy machine are slower, ratios less so.

`--library-check K`: also plain and prompt-lookup decoding of the first K cases in model mode
(greedy) by our loops and by transformers' own `generate` (with `prompt_lookup_num_tokens=10`),
total seconds each and whether the outputs agree: our loops are not slower than the library's.

Prints a table per corpus (seconds, forwards, exact, x vs ar, x vs pld-best) and the sweep, then
one JSON line: {"corpora": {NAME: {"seconds": {STRATEGY: s}, "forwards": {STRATEGY: n}, ...}}, ...}.
Exit 1 when any output differs from its target; bad usage exits 2 with one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from backend.cli.common import UsageError, emit, format_table
from backend.cli.edit_commands import _positive_int as _positive


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="every strategy on corpora, timed in one process (reference replay)")
    parser.add_argument("corpora", nargs="+", metavar="CORPUS")
    parser.add_argument("--limit", type=_positive, default=None, help="first K cases of each corpus")
    parser.add_argument("--model", default=None)
    parser.add_argument("--runtime", default="torch", help="torch or llama.cpp")
    parser.add_argument("--repeats", type=_positive, default=3, help="runs per case and strategy (median)")
    parser.add_argument("--top", type=_positive, default=3, help="best-predicted sweep settings to time")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--library-check", type=_positive, default=None, metavar="K",
                        help="also time transformers' generate (greedy, prompt lookup) against our loops on K cases")
    parser.set_defaults(handler=cmd_bench)


def _load_cases(names: list[str], data_dir: str | None, limit: int | None) -> dict[str, list[Any]]:
    from backend.data.corpora import CorpusError, load_corpus

    out = {}
    for name in names:
        try:
            cases = load_corpus(name, data_dir)
        except (CorpusError, OSError, ValueError) as error:
            raise UsageError(f"corpus {name}: {error}") from None
        if not cases:
            raise UsageError(f"corpus {name}: no cases")
        out[name] = cases[:limit] if limit else cases
    return out


def _open(model: str | None, runtime: str) -> Any:
    from backend.runtime.engine import EditError
    from backend.runtime.models import ModelUnavailable
    from backend.runtime.runtimes import open_engine

    try:
        return open_engine(model, runtime=runtime)
    except (ValueError, ModelUnavailable, EditError) as error:
        raise UsageError(str(error)) from None


def bench_corpus(engine: Any, cases: list[Any], *, repeats: int, top: int, library: int | None = None) -> dict[str, Any]:
    """One corpus: prepare, rank the sweep, time every strategy, summarise (see strategy_bench)."""
    from backend.measure import strategy_bench as sb
    from backend.runtime.engine import EditError

    try:
        prepared = sb.prepare_cases(engine, cases)
    except EditError as error:
        raise UsageError(str(error)) from None
    context = int(sum(len(c.plain.prompt_ids) for c in prepared) / len(prepared))
    cost = sb.interpolate(sb.forward_cost_table(engine.loaded, context))
    ranked = sb.rank_settings(engine.loaded, prepared, cost)
    run = sb.runners(engine, sb.shortlist(ranked, top), sb.hybrid_runner())
    sb.time_cases(prepared[:1], run, 1)  # warm-up: first forwards are 4-10x slower
    timings = sb.time_cases(prepared, run, repeats, progress=lambda line: print(line, file=sys.stderr, flush=True))
    summary = sb.summarize(timings, ranked)
    if library and getattr(engine.loaded, "model", None) is not None:
        summary["library_check"] = sb.library_check(engine, prepared[:library])
    return summary


def _table(name: str, summary: dict[str, Any]) -> str:
    rows = [[s, summary["seconds"][s], summary["forwards"][s], summary["exact"][s],
             summary["speedup_vs_ar"][s], summary["speedup_vs_pld_best"][s]] for s in summary["seconds"]]
    head = f"{name}: {summary['cases']} cases, pld-best = {summary['pld_best_setting']}"
    main = format_table(["strategy", "seconds", "forwards", "exact", "x vs ar", "x vs pld-best"], rows)
    sweep = sorted(summary["sweep"].items(), key=lambda kv: kv[1]["predicted_seconds"])
    sweep_rows = [[label, v["forwards"], v["predicted_seconds"], v["seconds"] if v["seconds"] is not None else "-"]
                  for label, v in sweep]
    return "\n".join([head, main, "", "sweep (predicted from forward counts; timed where shown)",
                      format_table(["setting", "forwards", "predicted s", "measured s"], sweep_rows), _library(summary), ""])


def _library(summary: dict[str, Any]) -> str:
    check = summary.get("library_check")
    if not check:
        return ""
    s, same, n = check["seconds"], check["same_output"], check["cases"]
    return (f"transformers generate, model mode, {n} cases, <= {check['max_new_tokens']} new tokens: "
            f"plain ours {s['ar']:.3g} s vs generate {s['generate']:.3g} s (same output {same['ar']}/{n}); "
            f"prompt lookup ours {s['pld']:.3g} s vs generate(prompt_lookup_num_tokens=10) {s['generate_pld']:.3g} s "
            f"(same output {same['pld']}/{n})")


def cmd_bench(args: argparse.Namespace) -> int:
    corpora = _load_cases(args.corpora, args.data_dir, args.limit)
    engine = _open(args.model, args.runtime)
    load_start = os.getloadavg()[0]
    results = {name: bench_corpus(engine, cases, repeats=args.repeats, top=args.top, library=args.library_check) for name, cases in corpora.items()}
    load_end = os.getloadavg()[0]
    table = "\n".join(_table(name, summary) for name, summary in results.items())
    table += f"\nmodel {engine.name} ({args.runtime}), {args.repeats} runs per case; load average {load_start:.1f} -> {load_end:.1f}"
    document = {"corpora": results, "model": engine.name, "runtime": args.runtime, "repeats": args.repeats,
                "load_average": [load_start, load_end]}
    emit(table, document)
    return 0 if all(all(r["exact"].values()) for r in results.values()) else 1
