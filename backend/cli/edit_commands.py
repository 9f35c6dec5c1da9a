"""Commands that run a model: `edit` (one edit, streamed) and `replay` (reference replay of corpora).

`edit --model M --source F --instruction TEXT [--strategy cad|ar|pld] [--lookup N/K] [--max-new-tokens N]
      [--temperature T] [--top-p P] [--seed S] [--target F] [--no-copy-rest]`
    Streams what the model writes to stderr as it is produced (for cad: the program; for ar / pld:
    the text), then prints to stdout the resolved output, a metrics table and, as the last line,
    one JSON document. With --target the run is in reference mode (the target is forced through
    the model; for cad, its oracle program) and the JSON says whether the output equals it. In
    model mode an output equal to the input is said on stderr and marked `"unchanged": true`.
    --no-copy-rest: an early end is left as the model wrote it (backend/runtime/early_end.py).

`replay CORPUS... [--model M] [--limit K] [--data-dir D] [--lookup N/K]`
    Measures, for each case, reference replay of the target through the same model with every
    strategy one after another in this process: copy-as-decode (the oracle program: gens forced
    token by token, copies in one forward each), plain decoding (one forced token per forward) and
    prompt-lookup decoding (drafts accepted while they match the target) twice: at transformers'
    defaults (pld, 2-gram/10) and tuned (pld_tuned, --lookup, default the setting `bench` found
    fastest on held-out commit edits). Per strategy: wall-clock
    seconds after the prompt prefill (the prefill is reported apart: the three prompts differ),
    forward passes, exact match with the target; for cad the boundary re-tokenisations and the
    jump-forward tokens (decode steps saved). Speed-ups are ratios of wall time: cad_vs_ar =
    ar / cad, pld_vs_ar = ar / pld, cad_vs_pld = pld / cad, cad_vs_pld_tuned = pld_tuned / cad, pooled per corpus and across corpora
    as ratios of summed seconds; "exact" = no error and output == target byte for byte. All of it
    is computed by backend/measure/replay.py, the same code the study uses. A table per corpus and
    pooled, then one JSON line. Exit 1 when any output differs from its target.

Bad usage or input (missing file, non-UTF-8 input, unknown model or corpus, a request the engine
refuses) exits 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from backend.cli.common import UsageError, emit, format_table, non_negative_int, positive_int, read_text_file
from backend.measure.replay import STRATEGIES
from backend.runtime.prompt_lookup import DEFAULT_LOOKUP, TUNED_LOOKUP, lookup_label
from backend.runtime.request import STRATEGIES as ENGINE_STRATEGIES


def load_engine(name: str | None, *, limits: Any = None, runtime: str = "auto", engine_url: str | None = None,
                engine_kind: str | None = None, copy_rest: bool = True, avoid_noops: bool = False,
                search_branches: int = 0, align_snippets: bool = True, guard_shapes: bool = True,
                forward_copies: bool = True) -> Any:
    """An EditEngine on the named model (default: models.yaml's default) in `runtime`, or on a remote
    server (engine_url + engine_kind; docs/DEPLOY.md); `copy_rest`, `avoid_noops`, `search_branches`, `align_snippets`, `guard_shapes`, `forward_copies` as open_engine's. UsageError if
    unavailable."""
    from backend.runtime.engine import EditError
    from backend.runtime.models import ModelUnavailable
    from backend.runtime.runtimes import open_engine

    try:
        return open_engine(name, runtime=runtime, engine_url=engine_url, engine_kind=engine_kind, limits=limits,
                           copy_rest=copy_rest, avoid_noops=avoid_noops, search_branches=search_branches,
                           align_snippets=align_snippets, guard_shapes=guard_shapes, forward_copies=forward_copies)
    except (ModelUnavailable, EditError, ValueError) as error:
        raise UsageError(str(error)) from None


def add_align_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-align-snippets", action="store_true",
                        help="let the model write every edit (default: an update snippet with `... existing code ...` "
                        "markers or a unified diff that the aligner places with certainty is merged by it; "
                        "backend/core/carried_edit.py)")


def add_shape_guard_flag(parser: argparse.ArgumentParser) -> None:
    """--no-shape-guard (--no-rename-guard, its first name, still accepted); --allow-backward-copies."""
    parser.add_argument("--allow-backward-copies", action="store_true",
                        help="model mode: let a copy go back over lines the program already copied, and the "
                        "program go on past the input's last line (default: copies move forward through the input "
                        "and one gen may follow its last line; backend/core/copy_order.py)")
    parser.add_argument("--no-shape-guard", "--no-rename-guard", dest="no_shape_guard", action="store_true",
                        help="model mode: let the program leave the shape the instruction fixes (default: a rename, "
        "\"Delete lines 4-6\", \"Add `x` after line 9\", \"Change 1 to 2 on line 12\" keep their lines, and the "
        "model writes only the new text; backend/runtime/shape_guard.py)")


def _runtime_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"runtime": args.runtime, "engine_url": getattr(args, "engine_url", None),
            "engine_kind": getattr(args, "engine_kind", None)}


def _add_runtime_flags(parser: argparse.ArgumentParser, *, remote: bool) -> None:
    from backend.runtime.remote_client import ENGINE_KINDS
    from backend.runtime.runtimes import AUTO_HELP, DEFAULT_RUNTIME, RUNTIME_CHOICES

    parser.add_argument("--runtime", choices=RUNTIME_CHOICES, default=DEFAULT_RUNTIME, help=f"in-process runtime: {AUTO_HELP}")
    if remote:
        parser.add_argument("--engine-url", default=None, metavar="URL", help="decode on a vLLM / SGLang / llama.cpp server")
        parser.add_argument("--engine-kind", choices=ENGINE_KINDS, default=None, help="the server's kind, with --engine-url")


def _round(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


# --- edit ---------------------------------------------------------------------------------------


def cmd_edit(args: argparse.Namespace) -> int:
    from backend.runtime.engine import EditError

    source = read_text_file(args.source, "source")
    target = read_text_file(args.target, "target") if args.target else None
    mode = "reference" if target is not None else "model"
    from backend.runtime.request import CLI_LIMITS

    # the app's rules: no empty input, no blank instruction; --no-copy-rest: the program as the model ended it
    engine = load_engine(args.model, limits=CLI_LIMITS, copy_rest=not args.no_copy_rest,
                         avoid_noops=args.refuse_noops, search_branches=args.search,
                         align_snippets=not args.no_align_snippets, guard_shapes=not args.no_shape_guard,
                         forward_copies=not args.allow_backward_copies, **_runtime_options(args))
    try:
        events = engine.run(
            source, args.instruction, strategy=args.strategy, mode=mode, target=target,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
            lookup=args.lookup,
        )
    except EditError as error:
        raise UsageError(str(error)) from None
    result = None
    for event in events:
        if event.kind == "done":
            result = event.result
        elif event.kind == "restart":  # backend/runtime/window_retry.py: what streamed above is void
            sys.stderr.write(f"\n[restarted: {event.text}]\n")
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
    elif result.output == source and not result.partial and result.stop_reason != "error":
        document["unchanged"] = True  # the model's program copies the input: the instruction was not carried out
        print("note: the output equals the input: the model's program changed nothing", file=sys.stderr)
    if result.metrics.written_by:  # backend/core/snippet_apply.py
        print("note: written by the snippet aligner, not the model (the update snippet or diff was placed by "
              "its unchanged lines); --no-align-snippets lets the model write it", file=sys.stderr)
    elif result.metrics.aligner_declined:
        print(f"note: the snippet aligner left this edit to the model: {result.metrics.aligner_declined}", file=sys.stderr)
    sys.stdout.write(result.output if result.output.endswith("\n") or not result.output else result.output + "\n")
    emit(format_table(["metric", "value"], rows), document)
    return 0


# --- replay -------------------------------------------------------------------------------------


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def replay_table(summaries: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, s in summaries.items():
        n, speedup, boundary = s["cases"], s.get("speedup", {}), s["boundary"]
        rows.append([
            name, n, " ".join(f"{s['exact_runs'][k]['ok']}/{n}" for k in STRATEGIES),
            _x(speedup.get("cad_vs_ar")), _x(speedup.get("pld_vs_ar")), _x(speedup.get("cad_vs_pld")),
            _x(speedup.get("cad_vs_pld_tuned")),
            " / ".join(str(s.get(k, {}).get("forwards", "-")) for k in STRATEGIES),
            f"{boundary['boundary_retokenized']}/{boundary['copies']}", boundary["jump_forward_tokens"],
        ])
    return format_table(
        ["corpus", "cases", "exact cad ar pld pld-tuned", "cad/ar", "pld/ar", "cad/pld", "cad/pld-tuned",
         "forwards cad/ar/pld/pld-tuned",
         "retok/copies", "jump-fwd saved"],
        rows,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    from backend.data.corpora import CorpusError, load_corpus
    from backend.measure.replay import POOLED, pool_by_corpus, replay_case, warm_up

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    if args.tune_on is not None and (args.tune_on < 1 or args.limit is None):
        raise UsageError("--tune-on K needs K >= 1 and --limit (the dev cases are the K after the replayed ones)")
    corpora = []
    for name in args.corpora:
        try:
            cases = load_corpus(name, args.data_dir)
        except CorpusError as error:
            raise UsageError(str(error)) from None
        dev = cases[args.limit: args.limit + args.tune_on] if args.tune_on else []
        corpora.append((name, cases[: args.limit] if args.limit else cases, dev))
    engine = load_engine(args.model, **_runtime_options(args))
    warm_up(engine)
    tuned_by_corpus = _tune_per_corpus(engine, corpora) if args.tune_on else {}
    started = time.perf_counter()
    records: list[dict[str, Any]] = []
    for name, cases, _dev in corpora:
        tuned = tuple(tuned_by_corpus[name]["setting"]) if name in tuned_by_corpus else args.lookup
        for index, case in enumerate(cases, start=1):
            record = {"corpus": name, **replay_case(engine, case, tuned=tuned)}
            record["cad"].pop("program", None)
            records.append(record)
            print(
                f"[replay] {name} {index}/{len(cases)} {case.id}: cad/ar {_x(record['speedup']['cad_vs_ar'])} "
                f"exact {'/'.join(str(bool(record[s].get('exact'))) for s in STRATEGIES)}",
                file=sys.stderr, flush=True,
            )
    summaries = pool_by_corpus(records, summarize)
    if len(corpora) == 1 and records:
        del summaries[POOLED]  # one corpus: pooled would repeat it
    document = {
        "command": "replay", "model": engine.name, "weights": engine.loaded.weights_label,
        "device": str(engine.loaded.device), "dtype": str(engine.loaded.dtype).replace("torch.", ""),
        "seconds": time.perf_counter() - started,
        "tuned_lookup": "per corpus, chosen on a dev split" if tuned_by_corpus else lookup_label(args.lookup),
        "summary": summaries, "cases": _rounded(records),
    }
    if tuned_by_corpus:
        document["tuned_by_corpus"] = tuned_by_corpus
    emit(replay_table(summaries), document)
    return 0 if all(s["all_exact"] for s in summaries.values()) else 1


def _tune_per_corpus(engine: Any, corpora: list[tuple[str, list[Any], list[Any]]]) -> dict[str, dict[str, Any]]:
    """Per corpus, prompt lookup's setting predicted fastest on its dev cases (backend.measure.tune_lookup)."""
    from backend.measure.tune_lookup import forward_cost, tune_on_dev

    cost = forward_cost(engine)
    out = {}
    for name, _cases, dev in corpora:
        out[name] = tune_on_dev(engine, dev, cost)
        print(f"[replay] {name}: prompt lookup tuned on {len(out[name]['dev_cases'])} dev cases: {out[name]['label']}",
              file=sys.stderr, flush=True)
    return out


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The replay summary of some cases: timings pooled as ratios of sums, exact runs out of all
    cases, the copy joins (all from backend.measure.replay)."""
    from backend.measure.replay import boundary_summary, exact_counts, summarize_replay

    exact = exact_counts(records)
    return {**summarize_replay(records), "exact_runs": exact, "boundary": boundary_summary(records),
            "all_exact": all(counts["ok"] == counts["cases"] for counts in exact.values())}


def _rounded(value: Any) -> Any:
    """Floats to 6 decimals, in nested dicts and lists (the per-case records of the JSON document)."""
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return _round(value)


# --- registration -------------------------------------------------------------------------------


def _lookup(text: str) -> tuple[int, int]:
    """'3/64' or '3-gram/64' -> (3, 64); the engine checks the ranges."""
    from backend.runtime.prompt_lookup import parse_setting

    try:
        setting = parse_setting(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return setting.ngram, setting.drafts


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("edit", help="one edit through a model, streamed; output, metrics, JSON")
    p.add_argument("--model", default=None, help="models.yaml entry (default: the embedded SmolLM2)")
    p.add_argument("--source", required=True, metavar="F", help="the input file (UTF-8)")
    p.add_argument("--instruction", default=None, metavar="TEXT")
    p.add_argument("--strategy", choices=ENGINE_STRATEGIES, default="cad")
    p.add_argument("--lookup", type=_lookup, default=DEFAULT_LOOKUP, metavar="N/K",
                   help="prompt lookup (--strategy pld): largest n-gram N, K draft tokens (default 2/10, transformers')")
    p.add_argument("--max-new-tokens", type=positive_int, default=512, metavar="N")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P")
    p.add_argument("--seed", type=int, default=None, metavar="S")
    p.add_argument("--target", default=None, metavar="F", help="the desired result: reference mode")
    p.add_argument("--no-copy-rest", action="store_true",
                   help="keep the program as the model ended it (default: an early end after a copy copies the rest)")
    p.add_argument("--refuse-noops", action="store_true",
                   help="refuse no-op items: a gen opening with the line a copy would give, a copy right after "
                   "a copy (backend/runtime/noop_guard.py; off by default: it gained no exact edit)")
    p.add_argument("--search", type=non_negative_int, default=0, metavar="K",
                   help="likelihood search (model mode, greedy, in process): also decode K branches of the greedy program, each taking the runner-up at one of its K least certain choices, and keep the most probable finished program (backend/runtime/search.py); costs about K+1 decodes")
    add_align_flag(p)
    add_shape_guard_flag(p)
    _add_runtime_flags(p, remote=True)
    p.set_defaults(handler=cmd_edit)

    p = subparsers.add_parser("replay", help="reference replay of corpora: cad vs ar vs pld wall clock")
    p.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus names or case-format .jsonl paths")
    p.add_argument("--model", default=None, help="models.yaml entry (default: the embedded SmolLM2)")
    p.add_argument("--limit", type=int, default=None, metavar="K", help="first K cases of each corpus")
    p.add_argument("--data-dir", default=None, metavar="D", help="where named corpora live (default ../shared/data)")
    p.add_argument("--lookup", type=_lookup, default=TUNED_LOOKUP, metavar="N/K",
                   help=f"the tuned prompt-lookup run's setting (default {TUNED_LOOKUP[0]}/{TUNED_LOOKUP[1]}: "
                        "bench's fastest on held-out commit edits)")
    p.add_argument("--tune-on", type=int, default=None, metavar="K",
                   help="instead of --lookup: per corpus, the sweep setting predicted fastest on the K cases after "
                        "the --limit replayed ones (a dev split the replay never times)")
    _add_runtime_flags(p, remote=False)
    p.set_defaults(handler=cmd_replay)
