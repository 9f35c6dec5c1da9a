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
        logits = cache.step(span[0])
        for token in span[1:]:
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
