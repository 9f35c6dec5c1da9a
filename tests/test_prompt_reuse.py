"""Prompt reuse (`handle.PromptReuse`, `EditEngine(reuse_prompt=True)`): a run starts from the cache
the last one left and reads only the part of its prompt that differs; what it decodes is what a
cold engine decodes."""

from __future__ import annotations

import pytest

from backend.runtime.engine import EditEngine
from backend.runtime.handle import reuse_prompt_prefix

SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(12))
TARGET = SOURCE.replace("x + 7", "x - 7")


class _HeldTokens:
    """Just the part of a DecodeCache that reuse_prompt_prefix touches."""

    def __init__(self, ids: list[int]) -> None:
        self.token_ids = list(ids)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    def truncate(self, length: int) -> None:
        del self.token_ids[length:]


@pytest.mark.parametrize("held, prompt, kept", [
    ([], [1, 2, 3], 0),                    # a fresh cache
    ([1, 2, 3, 4, 5], [1, 2, 9, 9], 2),    # shared beginning, then different
    ([1, 2, 3], [1, 2, 3], 2),             # the same prompt: its last token is read again (logits)
    ([1, 2, 3], [1, 2, 3, 4, 5], 3),       # the prompt goes on past what is held
    ([7, 8], [1, 2], 0),                   # nothing shared: everything dropped
])
def test_reuse_prompt_prefix__keeps_the_shared_beginning_only(held, prompt, kept):
    cache = _HeldTokens(held)
    assert reuse_prompt_prefix(cache, prompt) == kept
    assert cache.token_ids == prompt[:kept]


def _shared_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _check_reuse_matches_cold(loaded) -> None:
    warm, cold = EditEngine(loaded, reuse_prompt=True), EditEngine(loaded)
    first = warm.run_to_result(SOURCE, "Make f7 subtract.", strategy="cad", mode="reference", target=TARGET)
    assert first.output == TARGET and first.metrics.prompt_reused_tokens is None  # nothing to reuse yet
    # the same file, another instruction: the prompt is shared up to the instruction
    prompt_a = warm.validate(SOURCE, "Make f7 subtract.", strategy="cad").prompt_ids
    prompt_b = warm.validate(SOURCE, "Change f7.", strategy="cad", max_new_tokens=24).prompt_ids
    second = warm.run_to_result(SOURCE, "Change f7.", strategy="cad", max_new_tokens=24)
    assert second.metrics.prompt_reused_tokens == _shared_prefix(prompt_a, prompt_b) > len(prompt_b) // 2
    expected = cold.run_to_result(SOURCE, "Change f7.", strategy="cad", max_new_tokens=24)
    assert (second.program, second.output, second.stop_reason) == (expected.program, expected.output, expected.stop_reason)
    assert expected.metrics.prompt_reused_tokens is None
    # another strategy, another prompt: only the shared system text's beginning is kept; exact still
    for strategy in ("ar", "pld", "cad"):
        result = warm.run_to_result(SOURCE, "Make f7 subtract.", strategy=strategy, mode="reference", target=TARGET)
        assert result.output == TARGET, strategy


def test_reuse__same_results_as_a_cold_engine_on_torch(tiny_model):
    _check_reuse_matches_cold(tiny_model)


def test_reuse__same_results_as_a_cold_engine_on_llamacpp():
    from backend.runtime.llamacpp import load_llamacpp

    handle = load_llamacpp("smollm2-135m", n_ctx=2048, threads=1)
    try:
        _check_reuse_matches_cold(handle)
        # a cache that lost the context to another (the engine's step timing takes it) is not reused
        warm = EditEngine(handle, reuse_prompt=True)
        warm.run_to_result(SOURCE, "Change f7.", strategy="ar", max_new_tokens=4)
        warm.step_seconds(context_tokens=32, warmup=1, steps=1)
        again = warm.run_to_result(SOURCE, "Change f7.", strategy="ar", max_new_tokens=4)
        assert again.metrics.prompt_reused_tokens is None and again.output
    finally:
        handle.close()


def test_reuse__a_cancelled_prefill_leaves_a_usable_cache(tiny_model):
    import threading

    warm = EditEngine(tiny_model, reuse_prompt=True)
    cancel = threading.Event()
    cancel.set()
    stopped = warm.run_to_result(SOURCE, "Make f7 subtract.", strategy="cad", mode="reference", target=TARGET,
                                 cancel=cancel)
    assert stopped.stop_reason == "cancel"
    done = warm.run_to_result(SOURCE, "Make f7 subtract.", strategy="cad", mode="reference", target=TARGET)
    assert done.output == TARGET


def test_measure_prompt_reuse__a_second_edit_keeps_the_file(tiny_model):
    from types import SimpleNamespace

    from backend.measure.prompt_reuse import measure_prompt_reuse, reuse_line

    cases = [SimpleNamespace(source=SOURCE, instruction="Make f7 subtract."),
             SimpleNamespace(source=TARGET, instruction="Rename f3 to g3.")]
    reuse = measure_prompt_reuse(tiny_model, cases, repeats=1)
    assert set(reuse) == {"cad", "plain"}
    for kind, r in reuse.items():
        assert r["cases"] == 2 and r["cold_seconds"] > 0 and r["warm_seconds"] > 0
        # everything up to the instruction is kept: the whole numbered (or plain) file
        assert r["prompt_tokens"] * 0.8 < r["kept_tokens"] < r["prompt_tokens"], kind
    assert "prompt reuse (a second edit of the same file): cad prompt" in reuse_line(reuse)


def test_prompt_reuse__a_cache_out_of_step_with_its_tokens_is_not_reused(tiny_model):
    import torch

    from backend.runtime.handle import PromptReuse

    handle = PromptReuse(tiny_model)
    first = handle.new_cache()
    first.append_span([11, 12, 13])
    assert handle.new_cache() is first and first.reusable
    # nothing shared: everything dropped, and the emptied cache computes what a fresh one does
    assert reuse_prompt_prefix(first, [21, 22, 23]) == 0 and first.length == 0
    assert torch.allclose(first.append_span([21, 22]), tiny_model.new_cache().append_span([21, 22]), atol=1e-5)
    first.token_ids.pop()  # as if a forward had failed after the KV cache grew
    second = handle.new_cache()
    assert not first.reusable and second is not first and second.length == 0
