"""Commands that teach the model the program format and measure what it learned.

`make-data [--out DIR] [--train N] [--dev N] [--seed S] [--edits-per-window K] [--no-js] [--data-dir D]`
    Writes DIR/train.jsonl, DIR/dev.jsonl and DIR/manifest.json (backend.training.dataset):
    edit cases on windows of real code with cost-objective oracle programs under the SmolLM2
    tokenizer, split by source file, checked by hash against every evaluation case (exit 1 on a leak).
`train --data DIR/train.jsonl --out ADAPTER_DIR [--max-steps N] [--max-minutes M] [--resume] ...`
    LoRA training (backend.training.trainer); progress on stderr; checkpoints; the adapter and card.
`evaluate CORPUS... [--model M] [--runtime auto|torch|llama.cpp] [--engine-url URL --engine-kind K] [--limit K] [--strategy cad|ar|pld ...] [--speed-limit K]`
    Model mode: only the source and the instruction are given (backend.training.evaluate).

Each prints a table and, as its last stdout line, one JSON document. Bad usage exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, ContextManager, TextIO

from backend.cli.common import UsageError, emit, format_table, non_negative_int
from backend.cli.edit_commands import _add_runtime_flags, _runtime_options, add_align_flag, add_shape_guard_flag


def register(subparsers: Any) -> None:
    _register_make_data(subparsers)
    _register_train(subparsers)
    _register_evaluate(subparsers)
    _register_adapter_cost(subparsers)


def _register_make_data(subparsers: Any) -> None:
    data = subparsers.add_parser("make-data", help="training/dev edit cases with oracle programs")
    data.add_argument("--out", default="var/training-data", help="output directory (default var/training-data)")
    data.add_argument("--train", type=int, default=6000, help="training cases (default 6000)")
    data.add_argument("--dev", type=int, default=240, help="dev cases from held-out files (default 240)")
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--no-js", action="store_true", help="skip the npm JavaScript sources (no npm here)")
    data.add_argument("--edits-per-window", type=int, default=1,
                      help="training split: up to K edits of each code window (they share a prompt: train --pack "
                           "computes it once for all of them); the dev split keeps one (default 1)")
    data.add_argument("--npm-cache", default=None, help="where npm tarballs are kept (default: user cache)")
    data.add_argument("--data-dir", default=None, help="evaluation corpora for the leak check (default ../shared/data)")
    data.set_defaults(handler=cmd_make_data)


def _register_train(subparsers: Any) -> None:
    train = subparsers.add_parser("train", help="LoRA-train the model to write programs")
    train.add_argument("--data", required=True, help="train.jsonl from make-data")
    train.add_argument("--out", required=True, help="adapter directory to write")
    train.add_argument("--model", default="smollm2-135m", help="base model (default smollm2-135m)")
    train.add_argument("--max-steps", type=int, default=250)
    train.add_argument("--examples-per-step", type=int, default=8)
    train.add_argument("--lr", type=float, default=4e-4)
    train.add_argument("--rank", type=int, default=16)
    train.add_argument("--max-tokens", type=int, default=2048)
    train.add_argument("--max-minutes", type=float, default=None, help="stop cleanly (with a checkpoint) after this long")
    train.add_argument("--checkpoint-every", type=int, default=10)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--threads", type=int, default=None)
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    train.add_argument("--init-adapter", default=None, help="warm start from a saved adapter (e.g. the shipped one)")
    train.add_argument("--changed-weight", type=float, default=1.0,
                       help="loss weight of the tokens of a gen that write new text (default 1: a plain mean)")
    train.add_argument("--kind-weight", action="append", default=[], metavar="KIND=N",
                       help="each example of KIND appears N times per epoch (repeatable; 0 leaves it out; default 1)")
    train.add_argument("--dropout", type=float, default=0.0, help="LoRA dropout (default 0; runs 1-10 used 0.05)")
    train.add_argument("--attention", choices=("eager", "sdpa"), default="eager",
                       help="attention kernel while training (default eager: faster on a CPU at these lengths)")
    train.add_argument("--prompt", choices=("zero-shot", "instruction-first", "located"), default="zero-shot",
                       help="prompt layout to train on; the adapter's training.json records it and loading uses it "
                            "(instruction-first: the instruction also before the numbered input)")
    train.add_argument("--pack", type=int, default=1, metavar="K",
                       help="up to K examples of one window in one forward, their shared prompt computed once "
                            "(data from make-data --edits-per-window; same loss and gradient; default 1: off)")
    train.set_defaults(handler=cmd_train)


def _register_evaluate(subparsers: Any) -> None:
    evaluate = subparsers.add_parser("evaluate", help="model-mode evaluation: finished programs, exact match, speed")
    evaluate.add_argument("corpora", nargs="+", metavar="CORPUS",
                          help="a corpus name, commits-heldout, or a case JSONL (e.g. var/training-data/dev.jsonl)")
    evaluate.add_argument("--model", default=None, help="model name (default: models.yaml's default)")
    evaluate.add_argument("--limit", type=int, default=None, help="first K cases of each corpus")
    evaluate.add_argument("--strategy", action="append", choices=("cad", "ar", "pld"), default=None,
                          help="strategies to run (repeatable; default cad)")
    evaluate.add_argument("--speed-limit", type=int, default=None,
                          help="run ar/pld only on the first K cases of each corpus (they decode the whole file)")
    evaluate.add_argument("--min-lines", type=int, default=0, help="only cases whose input has at least this many lines")
    evaluate.add_argument("--max-new-tokens", type=int, default=768)
    evaluate.add_argument("--data-dir", default=None)
    evaluate.add_argument("--out", default=None, help="also write per-case results (JSONL) here")
    evaluate.add_argument("--no-copy-rest", action="store_true",
                          help="measure the model's programs as written: an early end does not copy the rest of the input")
    evaluate.add_argument("--refuse-noops", action="store_true",
                          help="refuse no-op items: a gen opening with the line a copy would give, a copy right after "
                          "a copy (backend/runtime/noop_guard.py; off by default: it gained no exact edit)")
    evaluate.add_argument("--search", type=non_negative_int, default=0, metavar="K",
                          help="likelihood search (model mode, greedy, in process): also decode K branches of the greedy program, each taking the runner-up at one of its K least certain choices, and keep the most probable finished program (backend/runtime/search.py); costs about K+1 decodes")
    add_align_flag(evaluate)
    add_shape_guard_flag(evaluate)
    _add_runtime_flags(evaluate, remote=True)  # llama.cpp: the adapter merged into a copy of the base GGUF
    evaluate.set_defaults(handler=cmd_evaluate)


def _register_adapter_cost(subparsers: Any) -> None:
    cost = subparsers.add_parser("adapter-cost", help="decode step merged vs unmerged; zero- vs few-shot prompt")
    cost.add_argument("--model", default="smollm2-135m-cad", help="an adapter entry of models.yaml")
    cost.add_argument("--corpus", default="tests/fixtures/cad-dev-subset.jsonl", help="cases for the prompt comparison")
    cost.add_argument("--limit", type=int, default=8)
    cost.add_argument("--data-dir", default=None)
    cost.set_defaults(handler=cmd_adapter_cost)


def cmd_make_data(args: argparse.Namespace) -> int:
    from backend.data.corpora import CorpusError
    from backend.training.build import build_dataset

    if args.train <= 0 or args.dev < 0:
        raise UsageError("--train must be positive and --dev not negative")
    if not 1 <= args.edits_per_window <= 16:
        raise UsageError(f"--edits-per-window {args.edits_per_window}: a whole number from 1 to 16")
    try:
        summary = build_dataset(Path(args.out), train=args.train, dev=args.dev, seed=args.seed, js=not args.no_js,
                                edits_per_window=args.edits_per_window, npm_cache=args.npm_cache, data_dir=args.data_dir, log=_log)
    except (CorpusError, ValueError) as error:
        raise UsageError(str(error)) from None
    rows = [[split, kind, count] for split, counts in summary["counts"].items() for kind, count in counts.items()]
    emit(format_table(["split", "kind", "cases"], rows), summary)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from backend.runtime.models import ModelUnavailable
    from backend.training.trainer import TrainConfig, train

    if not Path(args.data).is_file():
        raise UsageError(f"training data {args.data}: no such file (run `python -m backend make-data` first)")
    if args.max_steps <= 0 or args.examples_per_step <= 0 or not args.lr > 0 or not args.changed_weight > 0:
        raise UsageError("--max-steps, --examples-per-step, --lr and --changed-weight must be positive")
    if not 1 <= args.pack <= 16:
        raise UsageError(f"--pack {args.pack}: a whole number from 1 to 16")
    if not 0.0 <= args.dropout < 1.0:
        raise UsageError(f"--dropout {args.dropout}: a probability in [0, 1)")
    config = TrainConfig(data=args.data, out=args.out, base_model=args.model, rank=args.rank, alpha=2 * args.rank,
                         lr=args.lr, max_steps=args.max_steps, examples_per_step=args.examples_per_step,
                         max_tokens=args.max_tokens, checkpoint_every=args.checkpoint_every,
                         max_minutes=args.max_minutes, seed=args.seed, threads=args.threads,
                         init_adapter=args.init_adapter, changed_weight=args.changed_weight,
                         kind_weights=_kind_weights(args.kind_weight), prompt=args.prompt,
                         dropout=args.dropout, attention=args.attention, pack=args.pack)
    manifest_path = Path(args.data).with_name("manifest.json")
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    manifest_summary = {k: manifest.get(k) for k in ("generator_version", "config", "counts", "languages", "leak_check",
                                                     "train_sha256", "dev_sha256", "train_commit_repos")}
    try:
        card = train(config, resume=args.resume, manifest=manifest_summary)
    except (ModelUnavailable, ValueError) as error:
        raise UsageError(str(error)) from None
    table = format_table(["steps", "examples", "tokens", "example tokens", "minutes", "tokens/s", "first loss", "last loss"],
                         [[card["steps"], card["examples_seen"], card["tokens_seen"], card["example_tokens_seen"],
                           card["wall_seconds"] / 60, card["tokens_per_second"], card["loss_first"], card["loss_last_10"]]])
    emit(table, {k: v for k, v in card.items() if k != "curve"})
    return 0


def _kind_weights(values: list[str]) -> tuple[tuple[str, int], ...]:
    """`--kind-weight KIND=N` values as (kind, N) pairs; a malformed one is a usage error."""
    pairs = []
    for value in values:
        kind, _, times = value.partition("=")
        if not kind or not times.isdigit():
            raise UsageError(f"--kind-weight {value!r}: expected KIND=N with N a whole number >= 0, e.g. literal=3")
        pairs.append((kind, int(times)))
    return tuple(pairs)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from backend.cli.edit_commands import load_engine
    from backend.training.evaluate import Evaluation

    strategies = tuple(dict.fromkeys(["cad"] + list(args.strategy or [])))
    if args.limit is not None and args.limit <= 0:
        raise UsageError("--limit must be positive")
    with _open_results(args.out) as results:  # before the model loads: a bad --out fails in a second, not after the run
        # a server too: model mode needs no logits here
        engine = load_engine(args.model, copy_rest=not args.no_copy_rest, avoid_noops=args.refuse_noops,
                             search_branches=args.search, align_snippets=not args.no_align_snippets,
                             guard_shapes=not args.no_shape_guard, forward_copies=not args.allow_backward_copies,
                             **_runtime_options(args))
        evaluation = Evaluation(engine, strategies=strategies, speed_limit=args.speed_limit,
                                max_new_tokens=args.max_new_tokens)
        document: dict[str, Any] = {"model": engine.name, "runtime": engine.loaded.runtime,
                                    "strategies": list(strategies),
                                    "copy_rest": bool(getattr(engine, "copy_rest", False)),
                                    "avoid_noops": bool(getattr(engine, "avoid_noops", False)),
                                    "search_branches": int(getattr(engine, "search_branches", 0)),
                                    "align_snippets": bool(getattr(engine, "align_snippets", False)),
                                    "guard_shapes": bool(getattr(engine, "guard_shapes", False)),
                                    "forward_copies": bool(getattr(engine, "forward_copies", False)), "corpora": {}}
        table_rows = [_evaluate_corpus(name, args, evaluation, document, results) for name in args.corpora]
    emit(format_table(["corpus", "cases", "finished+valid", "exact", "failures"], table_rows), document)
    return 0


def _evaluate_corpus(name: str, args: argparse.Namespace, evaluation: Any, document: dict[str, Any],
                     results: TextIO | None) -> list[Any]:
    """Run every case of one corpus, add its summary to `document`, return its table row."""
    from backend.data.corpora import CorpusError
    from backend.training.evaluate import load_eval_corpus, summarize

    try:
        cases = load_eval_corpus(name, args.data_dir, args.limit, min_lines=args.min_lines)
    except CorpusError as error:
        raise UsageError(str(error)) from None
    rows = []
    for index, case in enumerate(cases):
        rows.append(evaluation.run_case(index, case))
        if results:  # each row as it is measured, so an interrupted run keeps what it did
            results.write(json.dumps({"corpus": name, **rows[-1]}, sort_keys=True) + "\n")
            results.flush()
        exact = sum(r.get("outcome") == "exact" for r in rows)
        _log(f"{name}: {index + 1}/{len(cases)} cases, exact {exact}")
    summary = summarize(rows)
    document["corpora"][name] = summary
    return [name, summary["cases"], summary["finished_valid"], summary["exact_match"],
            ", ".join(f"{k} {v}" for k, v in summary["failures"].items())]


def _open_results(out: str | None) -> ContextManager[TextIO | None]:
    """The per-case JSONL file of `evaluate --out` (closed by the `with`, also on an error), its folder
    made if missing; a path that cannot be written is a usage error. No --out: a context of None."""
    if not out:
        return contextlib.nullcontext(None)
    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("w", encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--out {out}: cannot write there ({error.strerror or error})") from None


def cmd_adapter_cost(args: argparse.Namespace) -> int:
    from backend.data.corpora import CorpusError, load_corpus
    from backend.measure.machine import machine_info
    from backend.runtime.models import ModelUnavailable, load_model, spec_for
    from backend.training.adapter_cost import merged_vs_unmerged, prompt_styles

    try:
        if spec_for(args.model).source.kind != "adapter":
            raise UsageError(f"{args.model} is not an adapter (an adapter entry of models.yaml or a directory `train` wrote)")
        cases = load_corpus(args.corpus, args.data_dir)[: args.limit]
        steps = merged_vs_unmerged(args.model)
        llama_steps = _llamacpp_costs(args.model)
        prompts = prompt_styles(load_model(args.model), cases)
    except (ModelUnavailable, CorpusError) as error:
        raise UsageError(str(error)) from None
    document = {"model": args.model, "cases": len(cases), **steps, **llama_steps, **prompts, "machine": machine_info()}
    rows = [[k, v] for k, v in document.items() if k not in ("machine", "model")]
    emit(format_table(["measure", "value"], rows), document)
    return 0


def _llamacpp_costs(model: str) -> dict[str, Any]:
    """The llama.cpp LoRA-vs-merged step times, or why there are none (llama-cpp-python missing)."""
    from backend.runtime.llamacpp import require_llama_cpp
    from backend.runtime.models import ModelUnavailable
    from backend.training.adapter_cost import llamacpp_merged_vs_lora

    try:
        require_llama_cpp()
    except ModelUnavailable as error:  # says how to install it
        return {"llamacpp": f"not measured: {error}"}
    return llamacpp_merged_vs_lora(model)


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
