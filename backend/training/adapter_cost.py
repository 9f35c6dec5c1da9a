"""What the trained adapter costs at decode time, measured: merged vs unmerged, zero- vs few-shot.

- Decode step: the base model with the LoRA adapter merged into its weights against the same
  adapter kept as separate low-rank layers (peft, unmerged): median seconds of one-token steps
  after a `context`-token prefill, after warm-up.
- The same on llama.cpp: the adapter as a run-time LoRA GGUF against merged into a copy of the
  base GGUF (`backend.runtime.merged_gguf`, what an adapter entry loads there).
- Prompt: the zero-shot prompt the trained model uses against the few-shot prompt an untrained
  model needs, on the same cases: tokens and median prefill seconds.

Ratios compare runs in the same process, one after another.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def _step_seconds(model: Any, context: int, steps: int, warmup: int) -> float:
    import torch

    from backend.runtime.kv import SequenceCache

    ids = [(i * 7919) % 40000 + 100 for i in range(context)]
    cache = SequenceCache(model)
    with torch.no_grad():
        cache.append_span(ids)
        times = []
        for index in range(warmup + steps):
            started = time.perf_counter()
            cache.step(ids[index % context])
            if index >= warmup:
                times.append(time.perf_counter() - started)
    return statistics.median(times)


def merged_vs_unmerged(spec_name: str, *, context: int = 512, steps: int = 15, warmup: int = 4) -> dict[str, float]:
    """Median decode-step seconds with the adapter unmerged (peft layers) and merged."""
    from peft import PeftModel

    from backend.runtime.models import load_model, spec_for

    spec = spec_for(spec_name)
    if spec.source.base is None or spec.adapter_dir is None:
        raise ValueError(f"{spec_name} is not an adapter entry")
    base = load_model(spec.source.base)
    unmerged = PeftModel.from_pretrained(base.model, str(spec.adapter_dir)).eval()
    unmerged_seconds = _step_seconds(unmerged, context, steps, warmup)
    merged = unmerged.merge_and_unload().eval()
    merged_seconds = _step_seconds(merged, context, steps, warmup)
    return {"unmerged_step_seconds": unmerged_seconds, "merged_step_seconds": merged_seconds,
            "merged_speedup": unmerged_seconds / merged_seconds}


def llamacpp_merged_vs_lora(spec_name: str, *, contexts: tuple[int, ...] = (512, 1500), steps: int = 12,
                            warmup: int = 3, rounds: int = 3) -> dict[str, float]:
    """On llama.cpp: median decode-step seconds of the adapter as a run-time LoRA GGUF and merged
    into a copy of the base GGUF (what an adapter entry loads), after a prefill of each context
    length; the two models alternate, `rounds` times, and each figure is the median of the rounds."""
    from backend.runtime.llamacpp import gguf_files, load_llamacpp
    from backend.runtime.models import spec_for

    spec = spec_for(spec_name)
    base, lora = gguf_files(spec, merge=False)
    merged, _ = gguf_files(spec, merge=True)
    n_ctx = max(contexts) + warmup + steps + 8
    models = {"lora": load_llamacpp(spec, gguf=base, lora=lora, n_ctx=n_ctx),
              "merged": load_llamacpp(spec, gguf=merged, n_ctx=n_ctx)}
    ids = [(i * 7919) % 40000 + 100 for i in range(max(contexts))]
    out: dict[str, float] = {}
    try:
        for context in contexts:
            medians: dict[str, list[float]] = {name: [] for name in models}
            for _ in range(rounds):
                for name, model in models.items():
                    medians[name].append(_llamacpp_step_seconds(model, ids[:context], steps, warmup))
            for name in models:
                out[f"llamacpp_{name}_step_seconds_{context}"] = statistics.median(medians[name])
            out[f"llamacpp_merged_speedup_{context}"] = (out[f"llamacpp_lora_step_seconds_{context}"]
                                                         / out[f"llamacpp_merged_step_seconds_{context}"])
    finally:
        for model in models.values():
            model.close()
    return out


def _llamacpp_step_seconds(model: Any, prompt: list[int], steps: int, warmup: int) -> float:
    cache = model.new_cache()
    cache.prefill(prompt)
    for index in range(warmup + steps):
        cache.step(prompt[index % len(prompt)])
    return statistics.median(cache.step_seconds[warmup:])


def prompt_styles(loaded: Any, cases: list[Any], *, repeats: int = 3) -> dict[str, float]:
    """Prompt tokens and median prefill seconds, zero-shot vs few-shot, summed over `cases`."""
    import torch

    from backend.runtime.kv import SequenceCache
    from backend.runtime.prompt import program_prompt_ids

    totals: dict[str, dict[str, float]] = {}
    for style in ("zero-shot", "few-shot"):
        tokens, seconds = 0, 0.0
        for case in cases:
            ids = program_prompt_ids(loaded.tokenizer, case.source, case.instruction, style=style)
            runs = []
            for _ in range(repeats):
                cache = SequenceCache(loaded.model)
                started = time.perf_counter()
                with torch.no_grad():
                    cache.append_span(ids)
                runs.append(time.perf_counter() - started)
            tokens += len(ids)
            seconds += statistics.median(runs)
        totals[style] = {"tokens": tokens, "seconds": seconds}
    return {"zero_shot_tokens": totals["zero-shot"]["tokens"], "few_shot_tokens": totals["few-shot"]["tokens"],
            "zero_shot_prefill_seconds": totals["zero-shot"]["seconds"],
            "few_shot_prefill_seconds": totals["few-shot"]["seconds"],
            "prefill_saved_seconds_per_case": (totals["few-shot"]["seconds"] - totals["zero-shot"]["seconds"]) / max(1, len(cases))}
