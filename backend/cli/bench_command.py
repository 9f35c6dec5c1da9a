"""`bench CORPUS... [--limit K] [--model M] [--runtime torch|llama.cpp|torch,llama.cpp] [--repeats R] [--top N]
       [--skip STRATEGY]... [--data-dir D] [--library-check K] [--prompt-reuse] [--predict-only]`

Reference replay of each case's target through one model with every strategy, measured in this
process (backend/measure/strategy_bench.py says how): plain decoding (`ar`), prompt lookup at
transformers' defaults (`pld`, 2-gram/10), prompt lookup at the fastest setting of the n-gram 1-4 x
draft 10-128 sweep on these same cases (`pld-best`; the N best-predicted settings are timed),
copy-as-decode (`cad`), hybrid copy-as-decode (`cad-hybrid`) and copy-as-decode without tag drafts
(`cad-no-tag-drafts`: every chosen tag token its own step, as before the drafts; the "tags" section
gives tag decode steps per copy for each).
Seconds are decode seconds after the prompt prefill, medians of R runs per case summed over the
cases; ratios are ratios of those sums, measured in the same run. The machine's load average at
start and end is printed: timings on a busy machine are slower, ratios less so.

`--skip cad-hybrid --skip cad-no-tag-drafts`: leave out the optional copy-as-decode variants (the
other strategies define the ratios and the bound and are always timed). With `--top 1` that is what
makes long files fit a 2-core CPU: every strategy replays the whole file, `repeats` + 1 times (the
warm-up round runs on the case with the fewest target tokens).

`--library-check K`: also plain and prompt-lookup decoding of the first K cases in model mode
(greedy) by our loops and by transformers' own `generate` (with `prompt_lookup_num_tokens=10`),
total seconds each and whether the outputs agree: our loops are not slower than the library's.

`--runtime torch,llama.cpp`: the same cases on each runtime in turn, in this one process, each
runtime's plain decode step timed (median of 7 after 3 warm-up steps at a 512-token context), and
a table of every (runtime, strategy) against the fastest runtime's plain decoding: what a CPU user
would pick instead (issue 11). JSON: {"runtimes": {RT: {"corpora": ..., "step_seconds": s}},
"versus_fastest_plain": {CORPUS: {"RT/STRATEGY": x}}, "fastest_plain": RT, ...}.

`--prompt-reuse`: also each case's prompt read cold and on a second edit of the same file by an
engine that reuses its cache (the app's; backend/measure/prompt_reuse.py), for the numbered and the
plain prompt (JSON "prompt_reuse").

Forward costs: one forward of 1-512 tokens is timed after the shortest prompt of the cases, after
the longest context their replays reach and in the middle (backend/measure/forward_cost.py); the
sweep's predictions and the bounds price each forward after the context it runs at, and the middle
table, predicted from the outer two, says how far that linear model is off (JSON "forward_cost").

The closed-form bound of the replayed programs, priced by the forward costs measured in the same run,
is printed next to copy-as-decode's measured speed-up over `ar` (JSON "vs_bound": the share of it),
with the context-priced bound beside it (each forward priced after the tokens before it).

`--predict-only`: time no strategy; from the forward costs and the forward counts alone, print what
plain decoding and every prompt-lookup setting would take and copy-as-decode's context-priced
bound (the fastest any copy-as-decode program of these edits can be on this machine): minutes
instead of an hour on long files, and the answer to "can copy-as-decode reach 2x the tuned peer
here?" (JSON "predicted_seconds": ar, pld, pld-best, cad-bound). One runtime only.

Prints a table per corpus (seconds, forwards, exact, x vs ar, x vs pld-best) and the sweep, then
one JSON line: {"corpora": {NAME: {"seconds": {STRATEGY: s}, "forwards": {STRATEGY: n}, ...}}, ...}.
Exit 1 when any output differs from its target; bad usage exits 2 with one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from backend.cli.common import UsageError, emit, format_table, positive_int

# strategy_bench.OPTIONAL_VARIANTS, spelled here so that parsing arguments does not import torch
SKIPPABLE = ("cad-hybrid", "cad-no-tag-drafts")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="every strategy on corpora, timed in one process (reference replay)")
    parser.add_argument("corpora", nargs="+", metavar="CORPUS")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="first K cases of each corpus that fit the model's context (longer ones are skipped, listed)")
    parser.add_argument("--model", default=None)
    parser.add_argument("--runtime", default="auto",
                        help="torch or llama.cpp, or both comma-separated (timed in turn in this one process); "
                             "auto (default): llama.cpp when it can run the model on this CPU-only machine, else torch")
    parser.add_argument("--repeats", type=positive_int, default=3, help="runs per case and strategy (median)")
    parser.add_argument("--top", type=positive_int, default=3, help="best-predicted sweep settings to time")
    parser.add_argument("--skip", action="append", default=[], choices=SKIPPABLE, metavar="STRATEGY",
                        help="leave out an optional variant: " + ", ".join(SKIPPABLE) + " (repeatable)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--library-check", type=positive_int, default=None, metavar="K",
                        help="also time transformers' generate (greedy, prompt lookup) against our loops on K cases")
    parser.add_argument("--prompt-reuse", action="store_true",
                        help="also time each prompt cold and on a second edit of the same file (prompt reuse)")
    parser.add_argument("--predict-only", action="store_true",
                        help="time no strategy: predict from forward counts and this machine's forward costs")
    parser.set_defaults(handler=cmd_bench)


def _load_cases(names: list[str], data_dir: str | None) -> dict[str, list[Any]]:
    from backend.data.corpora import CorpusError, load_corpus

    out = {}
    for name in names:
        try:
            cases = load_corpus(name, data_dir)
        except (CorpusError, OSError, ValueError) as error:
            raise UsageError(f"corpus {name}: {error}") from None
        if not cases:
            raise UsageError(f"corpus {name}: no cases")
        out[name] = cases  # --limit counts cases that fit the context (bench_corpus)
    return out


def _resolve(runtime: str, model: str | None) -> str:
    from backend.runtime.runtimes import resolve_runtime

    try:
        return resolve_runtime(runtime, model)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _open(model: str | None, runtime: str) -> Any:
    from backend.runtime.engine import EditError
    from backend.runtime.models import ModelUnavailable
    from backend.runtime.runtimes import open_engine

    try:
        return open_engine(model, runtime=runtime)
    except (ValueError, ModelUnavailable, EditError) as error:
        raise UsageError(str(error)) from None


def bench_corpus(engine: Any, cases: list[Any], *, repeats: int, top: int, library: int | None = None,
                 limit: int | None = None, skip: tuple[str, ...] = (), prompt_reuse: bool = False,
                 predict_only: bool = False) -> dict[str, Any]:
    """One corpus: prepare the first `limit` cases that fit the context (the others are skipped and
    listed), time the forward costs, rank the sweep, time every strategy but `skip` (or, with
    `predict_only`, none), summarise (see strategy_bench)."""
    from backend.measure import forward_cost as fc
    from backend.measure import strategy_bench as sb
    from backend.runtime.engine import EditError

    try:
        prepared, skipped = sb.prepare_fitting(engine, cases, limit)
    except EditError as error:
        raise UsageError(str(error)) from None
    if not prepared:
        raise UsageError(f"no case fits {engine.name}'s context ({len(skipped)} too long)")
    _progress(f"{len(prepared)} cases, {sum(len(c.plain.target_ids) for c in prepared)} target tokens")
    cost = _forward_costs(engine, prepared)
    _progress(f"counting the forwards of {len(sb.SWEEP)} prompt-lookup settings (no model)")
    ranked = sb.rank_settings(engine.loaded, prepared, cost)
    if predict_only:
        summary = sb.predict(engine, prepared, cost, ranked)
    else:
        summary = _timed(engine, prepared, ranked, cost, repeats=repeats, top=top, skip=skip)
    summary["forward_cost"] = {"contexts": cost.to_dict(), "linearity_check": fc.linearity_check(cost)}
    summary["skipped_too_long"] = skipped
    if library and not predict_only and getattr(engine.loaded, "model", None) is not None:
        summary["library_check"] = sb.library_check(engine, prepared[:library])
    if prompt_reuse:
        from backend.measure.prompt_reuse import measure_prompt_reuse

        _progress("prompt reuse: each prompt cold and on a second edit of the same file")
        summary["prompt_reuse"] = measure_prompt_reuse(engine.loaded, [c.program.request for c in prepared], repeats=repeats)
    return summary


def _forward_costs(engine: Any, prepared: list[Any]) -> Any:
    """Forward costs timed after the shortest prompt, the longest context the replays reach
    (numbered prompt + target) and the middle one (forward_cost.timed_contexts)."""
    from backend.measure import forward_cost as fc

    shortest = min(len(c.plain.prompt_ids) for c in prepared)
    longest = max(len(c.program.prompt_ids) + len(c.plain.target_ids) for c in prepared)
    return fc.measure(engine.loaded, fc.timed_contexts(shortest, longest, engine.context_length), progress=_progress)


def _timed(engine: Any, prepared: list[Any], ranked: Any, cost: Any, *, repeats: int, top: int,
           skip: tuple[str, ...]) -> dict[str, Any]:
    """Every strategy timed after a warm-up round on the cheapest case, summarised with the bounds."""
    from backend.measure import strategy_bench as sb

    run = sb.runners(engine, sb.shortlist(ranked, top), skip=skip)
    warm = sb.cheapest(prepared)
    _progress(f"warm-up round on {warm.id} ({len(warm.plain.target_ids)} target tokens): {', '.join(run)}")
    sb.time_cases([warm], run, 1)  # first forwards (and first grammar builds) are several times slower
    timings = sb.time_cases(prepared, run, repeats, progress=_progress)
    summary = sb.summarize(timings, ranked)
    summary["vs_bound"] = sb.versus_bound(engine, prepared, cost, summary["speedup_vs_ar"])
    return summary


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _table(name: str, summary: dict[str, Any]) -> str:
    if "predicted_seconds" in summary:
        return _prediction_table(name, summary)
    rows = [[s, summary["seconds"][s], summary["forwards"][s], summary["exact"][s],
             summary["speedup_vs_ar"][s], summary["speedup_vs_pld_best"][s]] for s in summary["seconds"]]
    head = _head(name, summary)
    bound = summary.get("vs_bound") or {}
    share = (bound.get("share_of_bound") or {}).get("cad")
    if bound.get("bound_speedup") is not None and share is not None:
        head += f"; closed-form bound {bound['bound_speedup']:.3g}x vs ar, cad measured {share:.0%} of it"
    in_context = (bound.get("share_of_context_bound") or {}).get("cad")
    if bound.get("context_bound_speedup") is not None and in_context is not None:
        head += f" (context-priced bound {bound['context_bound_speedup']:.3g}x, {in_context:.0%} of it)"
    main = format_table(["strategy", "seconds", "forwards", "exact", "x vs ar", "x vs pld-best"], rows)
    forward = _forward_cost_lines(summary.get("forward_cost"))
    if summary.get("prompt_reuse"):
        from backend.measure.prompt_reuse import reuse_line

        forward += "\n" + reuse_line(summary["prompt_reuse"])
    return "\n".join([head, main, forward, "", *_sweep(summary), _library(summary), ""])


def _head(name: str, summary: dict[str, Any]) -> str:
    skipped = summary.get("skipped_too_long") or []
    return (f"{name}: {summary['cases']} cases, pld-best = {summary['pld_best_setting']}"
            + (f"; skipped as too long for the context: {len(skipped)}" if skipped else ""))


def _sweep(summary: dict[str, Any]) -> list[str]:
    sweep = sorted(summary["sweep"].items(), key=lambda kv: kv[1]["predicted_seconds"])
    rows = [[label, v["forwards"], v["predicted_seconds"], v["seconds"] if v["seconds"] is not None else "-"]
            for label, v in sweep]
    return ["sweep (predicted from forward counts; timed where shown)",
            format_table(["setting", "forwards", "predicted s", "measured s"], rows)]


def _prediction_table(name: str, summary: dict[str, Any]) -> str:
    """--predict-only: predicted seconds of each strategy and cad's context-priced bound."""
    seconds = summary["predicted_seconds"]
    rows = [[s, seconds[s], summary["speedup_vs_ar"][s], summary["speedup_vs_pld_best"][s]] for s in seconds]
    head = _head(name, summary) + " (predicted, nothing timed; cad-bound: the fastest any copy-as-decode program can be)"
    main = format_table(["strategy", "predicted s", "x vs ar", "x vs pld-best"], rows)
    leads = sorted((c["cad_bound_vs_pld_best"] or 0.0) for c in summary["per_case"].values())
    spread = (f"per case, cad-bound vs pld-best ({summary['pld_best_setting']}): min {leads[0]:.2f}x, "
              f"median {leads[len(leads) // 2]:.2f}x, max {leads[-1]:.2f}x; >= 2x on {sum(x >= 2 for x in leads)} "
              f"of {len(leads)} cases")
    return "\n".join([head, main, spread, _forward_cost_lines(summary.get("forward_cost")), "", *_sweep(summary), ""])


def _forward_cost_lines(forward: dict[str, Any] | None) -> str:
    """One forward's cost per token at a few sizes after each timed context (what bounds every
    multi-token strategy against a decode step on this machine), and the linearity check."""
    if not forward:
        return ""
    lines = []
    for context, table in forward["contexts"].items():
        seconds = {int(n): s for n, s in table.items()}
        parts = [f"{n} tokens {seconds[n] * 1000:.1f} ms ({seconds[n] * 1000 / n:.2f} ms/token)"
                 for n in sorted(seconds) if n in (1, 8, 64, max(seconds))]
        lines.append(f"one forward after {context} tokens: " + ", ".join(parts))
    check = forward.get("linearity_check")
    if check and check.get("median_abs_error") is not None:
        worst = max(abs(e) for e in check["relative_error"].values())
        lines.append(f"after {check['context']} tokens, predicted from the outer two contexts: "
                     f"median error {check['median_abs_error']:.1%}, worst {worst:.1%}")
    return "\n".join(lines)


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
    corpora = _load_cases(args.corpora, args.data_dir)
    runtimes = [_resolve(r.strip(), args.model) for r in args.runtime.split(",") if r.strip()]
    if not runtimes or len(set(runtimes)) != len(runtimes):
        raise UsageError(f"--runtime {args.runtime!r}: name each runtime once (torch, llama.cpp)")
    if args.predict_only and len(runtimes) > 1:
        raise UsageError("--predict-only takes one runtime")
    load_start = os.getloadavg()[0]
    per_runtime: dict[str, dict[str, Any]] = {}
    name = ""
    for runtime in runtimes:
        engine = _open(args.model, runtime)
        name = engine.name
        step = engine.step_seconds(warmup=5, steps=31) if len(runtimes) > 1 else None
        per_runtime[runtime] = {"step_seconds": step, "corpora": {
            corpus: bench_corpus(engine, cases, repeats=args.repeats, top=args.top, library=args.library_check,
                                 limit=args.limit, skip=tuple(args.skip), prompt_reuse=args.prompt_reuse,
                                 predict_only=args.predict_only)
            for corpus, cases in corpora.items()}}
        del engine  # one model in memory at a time
    load_end = os.getloadavg()[0]
    footer = f"model {name} ({', '.join(runtimes)}), {args.repeats} runs per case; load average {load_start:.1f} -> {load_end:.1f}"
    common = {"model": name, "runtime": ",".join(runtimes), "repeats": args.repeats, "load_average": [load_start, load_end]}
    if len(runtimes) == 1:
        results = per_runtime[runtimes[0]]["corpora"]
        emit("\n".join(_table(c, summary) for c, summary in results.items()) + "\n" + footer,
             {"corpora": results, **common})
        return 0 if _all_exact(results) else 1
    across = versus_fastest_plain(per_runtime)
    tables = [f"== {runtime} (plain decode step {per_runtime[runtime]['step_seconds'] * 1000:.2f} ms)\n"
              + "\n".join(_table(c, summary) for c, summary in per_runtime[runtime]["corpora"].items())
              for runtime in runtimes]
    emit("\n".join([*tables, _across_table(across), footer]), {"runtimes": per_runtime, **across, **common})
    return 0 if all(_all_exact(r["corpora"]) for r in per_runtime.values()) else 1


def _all_exact(results: dict[str, Any]) -> bool:
    """Every timed output equal to its target (--predict-only times none: nothing to differ)."""
    return all(all(r.get("exact", {}).values()) for r in results.values())


def versus_fastest_plain(per_runtime: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per corpus: the runtime whose plain decoding was fastest, and every (runtime, strategy)'s
    speed-up over it (its seconds / theirs; all measured in this run on the same cases)."""
    corpora = next(iter(per_runtime.values()))["corpora"]
    fastest, versus = {}, {}
    for corpus in corpora:
        plain = {rt: r["corpora"][corpus]["seconds"]["ar"] for rt, r in per_runtime.items()}
        best = min(plain, key=lambda rt: plain[rt])
        fastest[corpus] = best
        versus[corpus] = {f"{rt}/{strategy}": (plain[best] / seconds if seconds else None)
                          for rt, r in per_runtime.items() for strategy, seconds in r["corpora"][corpus]["seconds"].items()}
    return {"fastest_plain": fastest, "versus_fastest_plain": versus}


def _across_table(across: dict[str, Any]) -> str:
    rows = [[corpus, key, f"{x:.2f}x" if x is not None else "-"]
            for corpus, values in across["versus_fastest_plain"].items() for key, x in values.items()]
    plain = ", ".join(f"{corpus}: {rt}" for corpus, rt in across["fastest_plain"].items())
    return "\n".join([f"against the fastest plain decoding ({plain})",
                      format_table(["corpus", "runtime/strategy", "x vs fastest plain"], rows), ""])
