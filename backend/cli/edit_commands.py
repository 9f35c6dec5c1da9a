"""Commands that run a model: `edit` (one edit, streamed) and `replay` (reference replay of corpora).

`edit --model M --source F --instruction TEXT [--strategy cad|ar|pld] [--max-new-tokens N]
      [--temperature T] [--top-p P] [--seed S] [--target F]`
    Streams what the model writes to stderr as it is produced (for cad: the program; for ar / pld:
    the text), then prints to stdout the resolved output, a metrics table and, as the last line,
    one JSON document. With --target the run is in reference mode (the target is forced through
    the model; for cad, its oracle program) and the JSON says whether the output equals it.

`replay CORPUS... [--model M] [--limit K] [--data-dir D]`
    Measures, for each case, reference replay of the target through the same model with all three
    strategies one after another in this process: copy-as-decode (the oracle program: gens forced
    token by token, copies in one forward each), plain decoding (one forced token per forward) and
    prompt-lookup decoding (drafts accepted while they match the target). Per strategy: wall-clock
    seconds after the prompt prefill (the prefill is reported apart: the three prompts differ),
    forward passes, exact match with the target; for cad the boundary re-tokenisations and the
    jump-forward tokens (decode steps saved). Speed-ups are ratios of wall time: cad_vs_ar =
    ar / cad, pld_vs_ar = ar / pld, cad_vs_pld = pld / cad. A table per corpus and pooled (medians),
    then one JSON line. Exit 1 when any output differs from its target.

Bad usage or input (missing file, non-UTF-8 input, unknown model or corpus, a request the engine
refuses) exits 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from backend.cli.common import UsageError, emit, format_table, read_text_file

STRATEGIES = ("cad", "ar", "pld")
SPEEDUPS = {"cad_vs_ar": ("ar", "cad"), "pld_vs_ar": ("ar", "pld"), "cad_vs_pld": ("pld", "cad")}
DEFAULT_INSTRUCTION = "Apply the edit."


def load_engine(name: str | None) -> Any:
    """An EditEngine on the named model (default: models.yaml's default). UsageError if unavailable."""
    from backend.runtime.engine import EditEngine, EditError
    from backend.runtime.models import ModelUnavailable, default_model_name, load_model

    try:
        loaded = load_model(name or default_model_name())
        return EditEngine(loaded)
    except (ModelUnavailable, EditError) as error:
        raise UsageError(str(error)) from None


def _round(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


# --- edit ---------------------------------------------------------------------------------------


def cmd_edit(args: argparse.Namespace) -> int:
    from backend.runtime.engine import EditError

    source = read_text_file(args.source, "source")
    target = read_text_file(args.target, "target") if args.target else None
    mode = "reference" if target is not None else "model"
    engine = load_engine(args.model)
    try:
        events = engine.run(
            source, args.instruction, strategy=args.strategy, mode=mode, target=target,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
        )
    except EditError as error:
        raise UsageError(str(error)) from None
    result = None
    for event in events:
        if event.kind == "done":
            result = event.result
        elif event.kind != "copy" or args.strategy != "cad":
            sys.stderr.write(event.text)
            sys.stderr.flush()
    sys.stderr.write("\n")
    assert result is not None
    metrics = {k: _round(v) for k, v in result.metrics.to_dict().items()}
    rows = [[key, value] for key, value in sorted(metrics.items())]
    rows += [["stop_reason", result.stop_reason], ["partial", result.partial]]
    if result.error:
        rows.append(["error", result.error])
    document: dict[str, Any] = {
        "command": "edit", "model": engine.name, "strategy": result.strategy, "mode": result.mode,
        "program": result.program, "output": result.output, "stop_reason": result.stop_reason,
        "partial": result.partial, "error": result.error, "metrics": metrics,
    }
    if target is not None:
        document["exact_match"] = result.output == target
        rows.append(["exact_match", document["exact_match"]])
    sys.stdout.write(result.output if result.output.endswith("\n") or not result.output else result.output + "\n")
    emit(format_table(["metric", "value"], rows), document)
    return 0


# --- replay -------------------------------------------------------------------------------------


def replay_case(engine: Any, case: Any) -> dict[str, Any]:
    """Reference replay of one case with cad, ar and pld (in that order); never raises for a run."""
    from backend.runtime.engine import EditError

    instruction = case.instruction or DEFAULT_INSTRUCTION
    record: dict[str, Any] = {"id": case.id}
    for strategy in STRATEGIES:
        started = time.perf_counter()
        try:
            result = engine.run_to_result(case.source, instruction, strategy=strategy, mode="reference", target=case.target)
        except EditError as error:
            record[strategy] = {"error": str(error), "exact": False}
            continue
        except Exception as error:  # a failing case is reported, the others still run
            record[strategy] = {"error": f"{type(error).__name__}: {error}", "exact": False}
            continue
        m = result.metrics
        record[strategy] = {
            "exact": result.output == case.target,
            "wall_seconds": m.wall_seconds,
            "prefill_seconds": m.prefill_seconds,
            "total_seconds": time.perf_counter() - started,
            "forwards": m.forwards,
            "output_tokens": m.output_tokens,
            "stop_reason": result.stop_reason,
            "error": result.error,
        }
        if strategy == "cad":
            record[strategy].update(
                tokens_copied=m.tokens_copied, tokens_generated=m.tokens_generated, tokens_tag=m.tokens_tag,
                jump_forward_tokens=m.jump_forward_tokens, boundary_retokenized=m.boundary_retokenized,
                copies=m.copies or 0,
            )
        if strategy == "pld":
            record[strategy]["accepted_draft_tokens"] = m.accepted_draft_tokens
    for name, (slow, fast) in SPEEDUPS.items():
        a, b = record[slow].get("wall_seconds"), record[fast].get("wall_seconds")
        record.setdefault("speedup", {})[name] = a / b if a and b else None
    return record


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians and totals over replayed cases (see the module docstring)."""
    out: dict[str, Any] = {"cases": len(records)}
    for strategy in STRATEGIES:
        runs = [r[strategy] for r in records]
        out[strategy] = {
            "exact": sum(1 for run in runs if run.get("exact")),
            "median_wall_seconds": _median([run.get("wall_seconds") for run in runs]),
            "median_forwards": _median([run.get("forwards") for run in runs]),
            "total_wall_seconds": sum(run.get("wall_seconds") or 0.0 for run in runs),
            "total_forwards": sum(run.get("forwards") or 0 for run in runs),
        }
    out["speedup"] = {name: _median([r["speedup"][name] for r in records]) for name in SPEEDUPS}
    cad = [r["cad"] for r in records]
    copies = sum(run.get("copies", 0) for run in cad)
    retokenized = sum(run.get("boundary_retokenized", 0) for run in cad)
    out["boundary_retokenized"] = retokenized
    out["boundary_retokenization_rate"] = retokenized / copies if copies else None
    out["copies"] = copies
    out["jump_forward_tokens"] = sum(run.get("jump_forward_tokens", 0) for run in cad)
    out["all_exact"] = all(r[s].get("exact") for r in records for s in STRATEGIES)
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def replay_table(summaries: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, s in summaries.items():
        n = s["cases"]
        rows.append([
            name, n,
            f"{s['cad']['exact']}/{n} {s['ar']['exact']}/{n} {s['pld']['exact']}/{n}",
            _x(s["speedup"]["cad_vs_ar"]), _x(s["speedup"]["pld_vs_ar"]), _x(s["speedup"]["cad_vs_pld"]),
            " / ".join("-" if s[k]["median_forwards"] is None else f"{s[k]['median_forwards']:g}" for k in STRATEGIES),
            f"{s['boundary_retokenized']}/{s['copies']}", s["jump_forward_tokens"],
        ])
    return format_table(
        ["corpus", "cases", "exact cad ar pld", "cad/ar", "pld/ar", "cad/pld", "forwards cad/ar/pld",
         "retok/copies", "jump-fwd saved"],
        rows,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    from backend.core.corpora import CorpusError, load_corpus

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    corpora = []
    for name in args.corpora:
        try:
            cases = load_corpus(name, args.data_dir)
        except CorpusError as error:
            raise UsageError(str(error)) from None
        corpora.append((name, cases[: args.limit] if args.limit else cases))
    engine = load_engine(args.model)
    # First runs are several times slower (allocator, kernels): warm every strategy up once.
    engine.run_to_result("a = 1\nb = 2\n", "Change 1 to 3.", strategy="cad", mode="reference", target="a = 3\nb = 2\n")
    for strategy in ("ar", "pld"):
        engine.run_to_result("a = 1\n", "Change 1 to 3.", strategy=strategy, mode="reference", target="a = 3\n")
    started = time.perf_counter()
    per_corpus: dict[str, list[dict[str, Any]]] = {}
    for name, cases in corpora:
        records = per_corpus.setdefault(name, [])
        for index, case in enumerate(cases, start=1):
            record = replay_case(engine, case)
            record["corpus"] = name
            records.append(record)
            print(
                f"[replay] {name} {index}/{len(cases)} {case.id}: cad/ar {_x(record['speedup']['cad_vs_ar'])} "
                f"exact {'/'.join(str(bool(record[s].get('exact'))) for s in STRATEGIES)}",
                file=sys.stderr, flush=True,
            )
    summaries = {name: summarize(records) for name, records in per_corpus.items()}
    everything = [r for records in per_corpus.values() for r in records]
    if len(per_corpus) > 1 or not summaries:
        summaries["pooled"] = summarize(everything)
    document = {
        "command": "replay", "model": engine.name, "weights": engine.loaded.weights_label,
        "device": str(engine.loaded.device), "dtype": str(engine.loaded.dtype).replace("torch.", ""),
        "seconds": time.perf_counter() - started, "summary": summaries,
        "cases": [{k: (v if not isinstance(v, dict) else {kk: _round(vv) for kk, vv in v.items()}) for k, v in r.items()}
                  for r in everything],
    }
    emit(replay_table(summaries), document)
    return 0 if all(s["all_exact"] for s in summaries.values()) else 1


# --- registration -------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("edit", help="one edit through a model, streamed; output, metrics, JSON")
    p.add_argument("--model", default=None, help="models.yaml entry (default: the embedded SmolLM2)")
    p.add_argument("--source", required=True, metavar="F", help="the input file (UTF-8)")
    p.add_argument("--instruction", default=None, metavar="TEXT")
    p.add_argument("--strategy", choices=STRATEGIES, default="cad")
    p.add_argument("--max-new-tokens", type=_positive_int, default=512, metavar="N")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P")
    p.add_argument("--seed", type=int, default=None, metavar="S")
    p.add_argument("--target", default=None, metavar="F", help="the desired result: reference mode")
    p.set_defaults(handler=cmd_edit)

    p = subparsers.add_parser("replay", help="reference replay of corpora: cad vs ar vs pld wall clock")
    p.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus names or case-format .jsonl paths")
    p.add_argument("--model", default=None, help="models.yaml entry (default: the embedded SmolLM2)")
    p.add_argument("--limit", type=int, default=None, metavar="K", help="first K cases of each corpus")
    p.add_argument("--data-dir", default=None, metavar="D", help="where named corpora live (default ../shared/data)")
    p.set_defaults(handler=cmd_replay)
