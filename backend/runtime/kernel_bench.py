"""The copy kernel: one forward over N appended tokens against N one-token decode steps.

What it measures: after a context of L tokens is in the KV cache, the time of
(a) `append_span` of N tokens (one forward; how a copy enters the cache) and
(b) N `step` calls over the same N tokens (how plain decoding would produce them),
rolled back between repeats so every repeat starts from the identical L-token context. Warm-up
first (first runs are 4-10x slower), then the median of `repeats`. GPU: CUDA events around the
work plus synchronize; CPU: perf_counter. It also checks that (a) and (b) agree: max |Δ| of the
last position's logits and whether their argmax is equal.

Tokens are seeded random ids (timing does not depend on them; shape models have no tokenizer).
The document it returns is a kernel table (docs/DESIGN.md) that `ceiling --kernel` reads, plus
machine info. Runs as `python -m backend bench-kernel ...` or, on a machine with only torch and
transformers (the GPU image), as `python backend/runtime/kernel_bench.py ...`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from typing import Any, Callable, Sequence

if __package__ in (None, ""):  # run as a script: import `backend` from the repository root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_NS = (8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXT = 512
DEFAULT_REPEATS = 5


class _Timer:
    """Seconds of work done in `fn()`: CUDA events + synchronize on GPU, perf_counter on CPU."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        torch = self.torch
        if self.cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            value = fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1000.0, value
        import time

        t0 = time.perf_counter()
        value = fn()
        return time.perf_counter() - t0, value


def machine_info(device: Any) -> dict[str, Any]:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
    }
    return info


def _random_ids(count: int, vocab: int, seed: int) -> list[int]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (count,), generator=generator).tolist()


def bench_kernel(
    loaded: Any,
    *,
    ns: Sequence[int] = DEFAULT_NS,
    context: int = DEFAULT_CONTEXT,
    repeats: int = DEFAULT_REPEATS,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The kernel table for `loaded` (a LoadedModel). Rejects n < 1, context < 1, repeats < 1 and
    context + max(n) beyond the model's context length (ValueError)."""
    import torch

    from backend.runtime.kv import SequenceCache

    ns = sorted(set(int(n) for n in ns))
    if not ns or ns[0] < 1:
        raise ValueError("every n must be >= 1")
    if context < 1 or repeats < 1:
        raise ValueError("context and repeats must be >= 1")
    limit = loaded.spec.context_length
    if context + ns[-1] > limit:
        raise ValueError(f"context {context} + n {ns[-1]} exceeds the model's context length {limit}")
    tokenizer_size = len(loaded.tokenizer) if loaded.tokenizer is not None else loaded.vocab_size
    vocab = min(loaded.vocab_size, tokenizer_size)
    timer = _Timer(loaded.device)
    cache = SequenceCache(loaded.model)
    cache.append_span(_random_ids(context, vocab, seed))

    def prefill(span: list[int]) -> torch.Tensor:
        return cache.append_span(span)

    def steps(span: list[int]) -> torch.Tensor:
        logits = None
        for token in span:
            logits = cache.step(token)
        return logits

    # warm-up: kernels, allocator and caches (first runs are 4-10x slower)
    warm = _random_ids(max(ns), vocab, seed + 1)
    for _ in range(2):
        for n in ns:
            timer(lambda: prefill(warm[:n]))
            cache.rollback(n)
        timer(lambda: steps(warm[:8]))
        cache.rollback(min(8, len(warm)))

    rows = []
    step_times: list[float] = []
    for n in ns:
        span = _random_ids(n, vocab, seed + 1000 + n)
        prefill_times, steps_times = [], []
        diff, same_argmax = 0.0, True
        for _ in range(repeats):
            t, last_prefill = timer(lambda: prefill(span))
            cache.rollback(n)
            prefill_times.append(t)
            t, last_step = timer(lambda: steps(span))
            cache.rollback(n)
            steps_times.append(t)
            diff = max(diff, float((last_prefill - last_step).abs().max()))
            same_argmax = same_argmax and int(last_prefill.argmax()) == int(last_step.argmax())
        prefill_s, steps_s = statistics.median(prefill_times), statistics.median(steps_times)
        step_times.append(steps_s / n)
        rows.append({
            "n": n,
            "prefill_seconds": prefill_s,
            "steps_seconds": steps_s,
            "speedup": steps_s / prefill_s,
            "max_abs_logit_diff": diff,
            "argmax_equal": same_argmax,
        })
        if progress:
            progress(f"n={n}: prefill {prefill_s:.4g} s, {n} steps {steps_s:.4g} s, speed-up {steps_s / prefill_s:.3g}x")
    return {
        "kind": "kernel-table",
        "model": loaded.spec.name,
        "weights": loaded.weights_label,
        "device": loaded.device.type,
        "dtype": str(loaded.dtype).replace("torch.", ""),
        "context": context,
        "step_seconds": step_times[0],  # per-token decode step at the context (smallest n: least growth)
        "repeats": repeats,
        "rows": rows,
        "machine": machine_info(loaded.device),
        "load_seconds": round(getattr(loaded, "load_seconds", 0.0), 3),
    }


def format_kernel_table(document: dict[str, Any]) -> str:
    from backend.cli.common import format_table

    head = (f"{document['model']} ({document['weights']}) on {document['machine']['device_name']}, "
            f"{document['dtype']}, context {document['context']}, step {document['step_seconds'] * 1000:.3g} ms, "
            f"median of {document['repeats']}")
    rows = [[r["n"], r["prefill_seconds"] * 1000, r["steps_seconds"] * 1000, r["speedup"], r["max_abs_logit_diff"],
             "yes" if r["argmax_equal"] else "NO"] for r in document["rows"]]
    return head + "\n" + format_table(["n", "prefill_ms", "steps_ms", "speedup", "max_abs_dlogit", "argmax_equal"], rows)


def parse_ns(text: str) -> list[int]:
    try:
        ns = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        raise ValueError(f"--n wants positive integers separated by commas, got {text!r}")
    return ns


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="a models.yaml entry (default: the default model)")
    parser.add_argument("--n", default=",".join(map(str, DEFAULT_NS)), help="span lengths, comma-separated")
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="tokens in the cache before each span")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="timed repeats (median), after warm-up")
    parser.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--out", default=None, help="also write the JSON document to this file")


def run(args: argparse.Namespace) -> int:
    """The bench-kernel command. Usage errors and unavailable models raise UsageError (exit 2)."""
    import json

    from backend.cli.common import UsageError, emit
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


def main(argv: list[str] | None = None) -> int:
    from backend.cli.common import UsageError

    parser = argparse.ArgumentParser(prog="kernel_bench.py", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
