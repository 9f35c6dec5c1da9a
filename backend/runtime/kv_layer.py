"""GrowingLayer: one transformer layer's K/V in a buffer with spare room (used by kv.SequenceCache).

Why: transformers' DynamicLayer appends with `torch.cat([keys, new])`, copying the layer's whole
K/V on every decode step (O(context) per step, 60 copies per step for SmolLM2's 30 layers). Here
appending writes in place into a buffer that grows by x1.5 when full (amortised O(new tokens)), and
`crop` only shortens the views: the dropped rows are overwritten by the next append. keys/values
stay `[B, H, length, D]` views, so attention and masks see exactly what DynamicLayer gives them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["DynamicLayer", "GrowingLayer"]

MIN_CAPACITY = 256  # tokens; the first allocation (a prompt is rarely shorter)


class GrowingLayer(DynamicLayer):  # type: ignore[misc]
    """A DynamicLayer whose keys/values are views [B, H, :length, D] of a larger buffer."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None) -> None:
        self.device = key_states.device
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._length = 0
        self.is_initialized = True

    def _reserve(self, needed: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        capacity = 0 if self._key_buffer is None else self._key_buffer.shape[-2]
        if needed <= capacity:
            return
        capacity = max(MIN_CAPACITY, needed + needed // 2)
        b, h, _, d = key_states.shape
        keys = key_states.new_empty((b, h, capacity, d))
        values = value_states.new_empty((b, value_states.shape[1], capacity, value_states.shape[-1]))
        if self._length and self._key_buffer is not None and self._value_buffer is not None:
            keys[:, :, : self._length] = self._key_buffer[:, :, : self._length]
            values[:, :, : self._length] = self._value_buffer[:, :, : self._length]
        self._key_buffer, self._value_buffer = keys, values

    def _set_views(self) -> None:
        if self._key_buffer is not None and self._value_buffer is not None:
            self.keys = self._key_buffer[:, :, : self._length]
            self.values = self._value_buffer[:, :, : self._length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """Write the new states after the current length; the keys/values [B, H, length, D]."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self._length + key_states.shape[-2]
        self._reserve(end, key_states, value_states)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[:, :, self._length : end] = key_states
        self._value_buffer[:, :, self._length : end] = value_states
        self._length = end
        self._set_views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last -tokens_to_remove positions (a positive count raises, like DynamicLayer)."""
        if tokens_to_remove > 0:
            raise ValueError("GrowingLayer.crop takes a negative count (tokens to remove)")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self._length = max(0, self._length + tokens_to_remove)
        self._set_views()

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        self._length = 0
        super().reset()
