"""Commands on the model runtime: bench-kernel, mask-cost.

- `bench-kernel --model M [--n 8,16,...] [--context L] [--repeats R] [--out F]`: one forward of N
  appended tokens against N one-token decode steps after an L-token context (see
  backend/runtime/kernel_bench.py); its JSON is a kernel table for `ceiling --kernel`.
- `mask-cost --vocab smollm2|qwen2.5 [--corpus C] [--limit K]`: the grammar FSM's per-token mask
  time (median and p90, microseconds) over the oracle programs of a corpus, tokenised with that
  vocabulary (backend.runtime.vocab.measure_mask_cost).

Each prints a table, then one JSON document as the last stdout line. A model or package that is
not available exits 2 with one line on stderr. torch is imported only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from backend.cli.common import UsageError, emit, format_table

VOCABULARIES = ("smollm2", "qwen2.5")


def register(subparsers: Any) -> None:
    from backend.runtime import kernel_bench

    bench = subparsers.add_parser("bench-kernel", help="copy kernel: one N-token forward vs N decode steps")
    kernel_bench.add_arguments(bench)
    bench.set_defaults(handler=kernel_bench.run)

    mask = subparsers.add_parser("mask-cost", help="grammar mask time per token at a real vocabulary")
    mask.add_argument("--vocab", required=True, choices=VOCABULARIES)
    mask.add_argument("--corpus", default="humanevalpack-python", help="corpus whose oracle programs are masked")
    mask.add_argument("--limit", type=int, default=60, help="cases from the corpus (default 60)")
    mask.add_argument("--data-dir", default=None, help="where named corpora live (default ../shared/data)")
    mask.set_defaults(handler=_mask_cost)


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
    from backend.core.corpora import CorpusError, load_corpus
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
    emit(table, document)
    return 0
