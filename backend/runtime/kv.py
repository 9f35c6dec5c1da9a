"""The copy primitive: one class owns a sequence's KV cache and every change to it.

`SequenceCache` knows token ids only, never text (like nanochat's engine). Every forward pass goes
through `_forward`, with explicit `position_ids` (transformers 5.24 ignores `cache_position`),
under `torch.inference_mode`, and is counted in `.forwards`:

    step(t)              # ids: [1, 1]  -> logits [V]     one decode step
    append_span(ts)      # ids: [1, N]  -> logits [V]     one forward, last position (the copy kernel)
    append_span_all(ts)  # ids: [1, N]  -> logits [N, V]  one forward, every position (draft check)
    prefill(ts, chunk=C, cancel=E)  # ceil(N/C) forwards of [1, <=C]; None when E was set between them
    rollback(k)          # cache.crop(-k): drop the last k positions
    step_seconds         # wall seconds of every one-token forward: a run's own decode-step time

Where a decode step's time goes (SmolLM2-135M, fp32, 1 thread, 512-token context, profiled under
load): ~85% in `aten::mm` (the GEMVs read all 540 MB of fp32 weights each step: the step is
memory-bound), ~5% `aten::cat` (transformers' DynamicLayer copies the whole K/V of every layer on
every step, O(context)), ~3% attention, the rest small ops; Python outside the forward < 1 ms.
So each layer's K/V lives in a `GrowingLayer` buffer with spare room: appending writes in place
and crop only moves the length (no copy), which removes the O(context) per-step cat.

Runs on transformers 5.24 (`cache=`) and 5.17 (`past_key_values=`): the keyword is chosen once
from the model's forward signature.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Protocol, Sequence

import torch


def _cache_keyword(model: Any) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _new_dynamic_cache(model: Any) -> Any:
    """A DynamicCache whose full-attention layers are GrowingLayers (sliding/other layers kept)."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # older signatures
        cache = DynamicCache()
    try:
        from backend.runtime.kv_layer import DynamicLayer, GrowingLayer
    except ImportError:  # a transformers without cache layers: keep its own cache
        return cache
    layers = getattr(cache, "layers", None)
    if layers:
        cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in layers]
    elif getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:  # layers made lazily
        cache.layer_class_to_replicate = GrowingLayer
    return cache


class _CancelFlag(Protocol):
    def is_set(self) -> bool: ...


def tail_rows(n: int, rows: int | None) -> int:
    """How many final positions' logits a forward of n tokens returns (`rows` None: all n)."""
    if rows is None:
        return n
    if not 1 <= rows <= n:
        raise ValueError(f"rows must be in 1..{n}, got {rows}")
    return rows


class SequenceCache:
    """One sequence (batch 1) in a transformers DynamicCache; `token_ids` mirrors the cache.

    Rejects: empty spans (ValueError), rollback of more than `length` or of a negative count
    (ValueError). Logits are returned as float32 on the model's device.
    """

    def __init__(self, model: Any, *, device: Any = None) -> None:
        self.model = model
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self._keyword = _cache_keyword(model)
        self._cache = _new_dynamic_cache(model)
        self.token_ids: list[int] = []
        self.forwards = 0
        self.step_seconds: list[float] = []  # wall seconds of each one-token forward, in order

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def reusable(self) -> bool:
        """True while the KV cache holds exactly `token_ids`, so a later run may keep a prefix of it
        (handle.PromptReuse); a forward that failed half-way may have left more behind."""
        return int(self._cache.get_seq_length()) == self.length

    def _forward(self, token_ids: Sequence[int], keep: int) -> torch.Tensor:
        # input_ids, position_ids: [1, S]; returns logits [keep, V]
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("empty span: nothing to append")
        start = self.length
        started = time.perf_counter()
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        position_ids = torch.arange(start, start + len(ids), dtype=torch.long, device=self.device).unsqueeze(0)
        with torch.inference_mode():
            out = self.model(
                input_ids=input_ids,
                position_ids=position_ids,
                use_cache=True,
                logits_to_keep=keep,
                **{self._keyword: self._cache},
            )
            logits = out.logits[0, -keep:].float()
        if len(ids) == 1:  # a decode step: its time feeds estimates made from the run's own steps
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the caller's argmax would wait for it anyway
            self.step_seconds.append(time.perf_counter() - started)
        self.forwards += 1
        self.token_ids.extend(ids)
        return logits

    def step(self, token_id: int) -> torch.Tensor:
        """Append one token; the next-token logits [V]."""
        return self._forward([token_id], 1)[0]

    def append_span(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Append N tokens in one forward; the logits [V] after the last of them."""
        return self._forward(token_ids, 1)[0]

    def append_span_all(self, token_ids: Sequence[int], rows: int | None = None) -> torch.Tensor:
        """Append N tokens in one forward; logits [N, V], row i predicting the token after token i
        (`rows`: only the last `rows` of them, [rows, V]: a wide span with a few drafts after it)."""
        return self._forward(token_ids, tail_rows(len(token_ids), rows))

    def prefill(self, token_ids: Sequence[int], *, chunk: int = 256,
                cancel: _CancelFlag | None = None) -> torch.Tensor | None:
        """Append N tokens in forwards of at most `chunk` tokens; the logits [V] after the last.

        `cancel.is_set()` is checked before each chunk: once it is set, returns None and the cache
        keeps the chunks already appended (so a cancel takes effect within one chunk's forward).
        Rejects an empty span and chunk < 1 (ValueError).
        """
        ids = list(token_ids)
        if chunk < 1:
            raise ValueError(f"prefill chunk must be >= 1, got {chunk}")
        if not ids:
            raise ValueError("empty span: nothing to append")
        logits = None
        for start in range(0, len(ids), chunk):
            if cancel is not None and cancel.is_set():
                return None
            logits = self._forward(ids[start : start + chunk], 1)[0]
        return logits

    def rollback(self, k: int) -> None:
        """Drop the last k positions (k = 0 is a no-op)."""
        if k < 0 or k > self.length:
            raise ValueError(f"cannot roll back {k} of {self.length} positions")
        if k == 0:
            return
        with torch.inference_mode():
            self._cache.crop(-k)
        del self.token_ids[-k:]

    def truncate(self, length: int) -> None:
        """Roll back to `length` positions."""
        self.rollback(self.length - length)
