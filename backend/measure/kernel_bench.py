"""The copy kernel: one forward over N appended tokens against N one-token decode steps.

What it measures: after a context of L tokens is in the KV cache, the time of
(a) `append_span` of N tokens (one forward; how a copy enters the cache) and
(b) N `step` calls over the same N tokens (how plain decoding would produce them),
rolled back between repeats so every repeat starts from the identical L-token context. Warm-up
first (first runs are 4-10x slower), then the median of `repeats`. GPU: CUDA events around the
work plus synchronize; CPU: perf_counter. It also checks that (a) and (b) agree: max |Δ| of the
last position's logits and whether their argmax is equal.

Tokens are seeded random ids (timing does not depend on them; shape models have no tokenizer).
The document it returns is a kernel table (docs/DESIGN.md, read by `backend.data.kernel`) plus
machine info. The command is `python -m backend bench-kernel` (backend/cli/runtime_commands.py).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

from backend.measure.machine import machine_info

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
        t0 = time.perf_counter()
        value = fn()
        return time.perf_counter() - t0, value


def _random_ids(count: int, vocab: int, seed: int) -> list[int]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (count,), generator=generator).tolist()


class _Bench:
    """One sequence cache after a fixed context: a span prefilled in one forward, or stepped token by
    token, each timed and rolled back so every run starts from the same context."""

    def __init__(self, loaded: Any, context_ids: list[int]) -> None:
        from backend.runtime.kv import SequenceCache

        self.timer = _Timer(loaded.device)
        self.cache = SequenceCache(loaded.model)
        self.cache.append_span(context_ids)

    def prefill(self, span: list[int]) -> tuple[float, Any]:
        seconds, logits = self.timer(lambda: self.cache.append_span(span))
        self.cache.rollback(len(span))
        return seconds, logits

    def steps(self, span: list[int]) -> tuple[float, Any]:
        def run() -> Any:
            logits = self.cache.step(span[0])
            for token in span[1:]:
                logits = self.cache.step(token)
            return logits

        seconds, logits = self.timer(run)
        self.cache.rollback(len(span))
        return seconds, logits

    def row(self, span: list[int], repeats: int) -> dict[str, Any]:
        """Median prefill and steps seconds of `span` over `repeats`, and whether their logits agree."""
        prefill_times, steps_times = [], []
        diff, same_argmax = 0.0, True
        for _ in range(repeats):
            t, last_prefill = self.prefill(span)
            prefill_times.append(t)
            t, last_step = self.steps(span)
            steps_times.append(t)
            diff = max(diff, float((last_prefill - last_step).abs().max()))
            same_argmax = same_argmax and int(last_prefill.argmax()) == int(last_step.argmax())
        prefill_s, steps_s = statistics.median(prefill_times), statistics.median(steps_times)
        return {"n": len(span), "prefill_seconds": prefill_s, "steps_seconds": steps_s, "speedup": steps_s / prefill_s,
                "max_abs_logit_diff": diff, "argmax_equal": same_argmax}


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
    bench = _Bench(loaded, _random_ids(context, vocab, seed))
    # warm-up: kernels, allocator and caches (first runs are 4-10x slower)
    warm = _random_ids(max(ns), vocab, seed + 1)
    for _ in range(2):
        for n in ns:
            bench.prefill(warm[:n])
        bench.steps(warm[:8])
    rows = []
    for n in ns:
        row = bench.row(_random_ids(n, vocab, seed + 1000 + n), repeats)
        rows.append(row)
        if progress:
            progress(f"n={n}: prefill {row['prefill_seconds']:.4g} s, {n} steps {row['steps_seconds']:.4g} s, "
                     f"speed-up {row['speedup']:.3g}x")
    return {
        "kind": "kernel-table",
        "model": loaded.spec.name,
        "weights": loaded.weights_label,
        "device": loaded.device.type,
        "dtype": str(loaded.dtype).replace("torch.", ""),
        "context": context,
        # per-token decode step at the context (smallest n: least growth)
        "step_seconds": rows[0]["steps_seconds"] / rows[0]["n"],
        "repeats": repeats,
        "rows": rows,
        "machine": machine_info(loaded.device),
        "load_seconds": round(getattr(loaded, "load_seconds", 0.0), 3),
    }
