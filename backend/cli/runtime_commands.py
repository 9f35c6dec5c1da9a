"""Commands on the model runtime: bench-kernel, mask-cost.

- `bench-kernel --model M [--n 8,16,...] [--context L] [--repeats R] [--device D] [--threads T] [--out F]`:
  one forward of N appended tokens against N one-token decode steps after an L-token context (see
  backend/measure/kernel_bench.py); its JSON is a kernel table for `ceiling --kernel`. On a machine
  with only torch and transformers (a GPU image) `python -m backend bench-kernel` runs as well: no
  command module imports anything heavier at import time.
- `mask-cost --vocab smollm2|qwen2.5 [--corpus C] [--limit K] [--runtime torch,llama.cpp]`: the
  grammar FSM's per-token mask time (median and p90, microseconds) over the oracle programs of a
  corpus, tokenised with that vocabulary (backend.runtime.vocab.measure_mask_cost); with
  `--runtime`, also the masked pick on each runtime's logits against plain argmax and that
  runtime's decode step, in one run (backend.measure.mask_share).

Each prints a table, then one JSON document as the last stdout line. A model or package that is
not available exits 2 with one line on stderr. torch is imported only when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from backend.cli.common import UsageError, emit, format_table

VOCABULARIES = ("smollm2", "qwen2.5")


DEFAULT_NS = (8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXT = 512
DEFAULT_REPEATS = 5


def register(subparsers: Any) -> None:
    bench = subparsers.add_parser("bench-kernel", help="copy kernel: one N-token forward vs N decode steps")
    bench.add_argument("--model", default=None, help="a models.yaml entry (default: the default model)")
    bench.add_argument("--n", default=",".join(map(str, DEFAULT_NS)), help="span lengths, comma-separated")
    bench.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="tokens in the cache before each span")
    bench.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="timed repeats (median), after warm-up")
    bench.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    bench.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    bench.add_argument("--out", default=None, help="also write the JSON document to this file")
    bench.set_defaults(handler=_bench_kernel)

    mask = subparsers.add_parser("mask-cost", help="grammar mask time per token at a real vocabulary")
    mask.add_argument("--vocab", required=True, choices=VOCABULARIES)
    mask.add_argument("--corpus", default="humanevalpack-python", help="corpus whose oracle programs are masked")
    mask.add_argument("--limit", type=int, default=60, help="cases from the corpus (default 60)")
    mask.add_argument("--data-dir", default=None, help="where named corpora live (default ../shared/data)")
    mask.add_argument("--runtime", default=None,
                      help="also time the masked pick on this runtime's logits against its plain step: torch, "
                           "llama.cpp or both comma-separated (the smollm2-135m model; --vocab smollm2)")
    mask.set_defaults(handler=_mask_cost)


# --- bench-kernel -------------------------------------------------------------------------------


def parse_ns(text: str) -> list[int]:
    """`--n`: positive integers separated by commas (ValueError otherwise)."""
    try:
        ns = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        raise ValueError(f"--n wants positive integers separated by commas, got {text!r}")
    return ns


def format_kernel_table(document: dict[str, Any]) -> str:
    head = (f"{document['model']} ({document['weights']}) on {document['machine']['device_name']}, "
            f"{document['dtype']}, context {document['context']}, step {document['step_seconds'] * 1000:.3g} ms, "
            f"median of {document['repeats']}")
    rows = [[r["n"], r["prefill_seconds"] * 1000, r["steps_seconds"] * 1000, r["speedup"], r["max_abs_logit_diff"],
             "yes" if r["argmax_equal"] else "NO"] for r in document["rows"]]
    return head + "\n" + format_table(["n", "prefill_ms", "steps_ms", "speedup", "max_abs_dlogit", "argmax_equal"], rows)


def _bench_kernel(args: argparse.Namespace) -> int:
    """Usage errors and unavailable models raise UsageError (exit 2)."""
    from backend.measure.kernel_bench import bench_kernel
    from backend.runtime.models import ModelUnavailable, default_model_name, load_model

    try:
        ns = parse_ns(args.n)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.context < 1 or args.repeats < 1:
        raise UsageError("--context and --repeats must be >= 1")
    try:
        loaded = load_model(args.model or default_model_name(), args.device, threads=args.threads)
    except ModelUnavailable as error:
        raise UsageError(str(error)) from None
    try:
        document = bench_kernel(loaded, ns=ns, context=args.context, repeats=args.repeats,
                                progress=lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1, sort_keys=True)
            f.write("\n")
    emit(format_kernel_table(document), document)
    return 0


# --- mask-cost ----------------------------------------------------------------------------------


def _vocabulary(name: str) -> tuple[Any, Any]:
    """(TokenVocabulary, encode: text -> ids) for a vocabulary name."""
    from backend.runtime import vocab
    from backend.tokenizers import TokenizerError, qwen25_encoding

    if name == "qwen2.5":
        try:
            encoding = qwen25_encoding()
        except TokenizerError as error:
            raise UsageError(str(error)) from None
        return vocab.vocabulary_from_tiktoken(encoding), encoding.encode_ordinary
    from backend.runtime.models import ModelUnavailable, load_hf_tokenizer

    try:
        tokenizer = load_hf_tokenizer("smollm2-135m")
    except ModelUnavailable as error:
        raise UsageError(str(error)) from None
    return vocab.vocabulary_from_hf(tokenizer), lambda text: tokenizer.encode(text, add_special_tokens=False)


def _mask_cost(args: argparse.Namespace) -> int:
    from backend.data.corpora import CorpusError, load_corpus
    from backend.core.fsm import TokenFSM
    from backend.core.lines import line_count
    from backend.core.oracle import oracle_program
    from backend.core.program import render_program
    from backend.runtime.vocab import measure_mask_cost

    if args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    try:
        cases = load_corpus(args.corpus, args.data_dir)[: args.limit]
    except CorpusError as error:
        raise UsageError(str(error)) from None
    vocabulary, encode = _vocabulary(args.vocab)
    programs = [encode(render_program(oracle_program(case.source, case.target))) for case in cases]
    n_lines = max(line_count(case.source) for case in cases)
    result = measure_mask_cost(TokenFSM(vocabulary), programs, n_lines)
    document = {"kind": "mask-cost", "vocab": args.vocab, "corpus": args.corpus, "cases": len(cases), **result}
    rows = [[name, result[name]["median_us"], result[name]["p90_us"], result[name]["max_us"]]
            for name in ("cached", "uncached")]
    table = (f"{args.vocab}: {result['vocab_size']} tokens, {result['steps']} mask calls over {len(cases)} "
             f"oracle programs of {args.corpus}\n" + format_table(["cache", "median_us", "p90_us", "max_us"], rows))
    if args.runtime:
        document["runtimes"] = _mask_share_per_runtime(args, programs, n_lines)
        table += "\n" + format_table(
            ["runtime", "masked_pick_us", "plain_pick_us", "mask_overhead_us", "step_ms", "share_of_step"],
            [[r["runtime"], r["masked_pick_us"], r["plain_pick_us"], r["mask_overhead_us"], r["step_ms"], r["share_of_step"]]
             for r in document["runtimes"].values()])
    emit(table, document)
    return 0


def _mask_share_per_runtime(args: argparse.Namespace, programs: list[list[int]], n_lines: int) -> dict[str, Any]:
    from backend.measure.mask_share import mask_share
    from backend.runtime.engine import EditError
    from backend.runtime.models import ModelUnavailable
    from backend.runtime.runtimes import open_engine, resolve_runtime

    if args.vocab != "smollm2":
        raise UsageError("--runtime measures the smollm2-135m model: use --vocab smollm2")
    out = {}
    for name in [part.strip() for part in args.runtime.split(",") if part.strip()]:
        try:
            engine = open_engine("smollm2-135m", runtime=resolve_runtime(name, "smollm2-135m"))
        except (ValueError, ModelUnavailable, EditError) as error:
            raise UsageError(str(error)) from None
        result = mask_share(engine, programs, n_lines)
        out[result["runtime"]] = result
    return out
