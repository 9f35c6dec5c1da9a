"""The copy primitive: one class owns a sequence's KV cache and every change to it.

`SequenceCache` knows token ids only, never text (like nanochat's engine). Every forward pass goes
through `_forward`, with explicit `position_ids` (transformers 5.24 ignores `cache_position`),
under `torch.inference_mode`, and is counted in `.forwards`:

    step(t)              # ids: [1, 1]  -> logits [V]     one decode step
    append_span(ts)      # ids: [1, N]  -> logits [V]     one forward, last position (the copy kernel)
    append_span_all(ts)  # ids: [1, N]  -> logits [N, V]  one forward, every position (draft check)
    rollback(k)          # cache.crop(-k): drop the last k positions

`TextContext` puts text on top: `append_text` keeps the text it appends tokenised the way the
tokenizer would tokenise it whole, by re-tokenising a small window across each join (see there).

Runs on transformers 5.24 (`cache=`) and 5.17 (`past_key_values=`): the keyword is chosen once
from the model's forward signature.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch


def _cache_keyword(model: Any) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _new_dynamic_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older signatures
        return DynamicCache()


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

    @property
    def length(self) -> int:
        return len(self.token_ids)

    def _forward(self, token_ids: Sequence[int], keep: int) -> torch.Tensor:
        # input_ids, position_ids: [1, S]; returns logits [keep, V]
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("empty span: nothing to append")
        start = self.length
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
        self.forwards += 1
        self.token_ids.extend(ids)
        return logits

    def step(self, token_id: int) -> torch.Tensor:
        """Append one token; the next-token logits [V]."""
        return self._forward([token_id], 1)[0]

    def append_span(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Append N tokens in one forward; the logits [V] after the last of them."""
        return self._forward(token_ids, 1)[0]

    def append_span_all(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Append N tokens in one forward; logits [N, V], row i predicting the token after token i."""
        return self._forward(token_ids, len(token_ids))

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


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class TextContext:
    """Text and model-chosen tokens over one SequenceCache, tokenised as the tokenizer would.

    `append_text(text)` (copied text, prompts) keeps every run of text appended since the last
    model-chosen token (the "tail") equal to `tokenizer(tail)`: tokens can merge across a join
    ("\\n" + "\\n" -> "\\n\\n", "\\n" + "    x" -> "\\n   " + " x"), so it re-tokenises a window
    that starts at a pre-token boundary at least `window_tokens` tokens before the join, rolls
    back the tokens that changed and prefills the canonical ones in ONE forward.
    `boundary_retokenized` counts the joins where tokenisation changed.

    `append_tokens(ids)` / `step(id)` add model-chosen tokens: never re-tokenised; they end the tail.
    Why a window and not the whole tail: encoding 8k characters takes ~8 ms here (2 busy cores).
    """

    def __init__(self, tokenizer: Any, cache: SequenceCache, *, window_tokens: int = 8) -> None:
        self.tokenizer = tokenizer
        self.cache = cache
        self.window_tokens = max(1, window_tokens)
        self.boundary_retokenized = 0  # joins where the tokens changed
        self.joins = 0                 # append_text calls that continued a non-empty tail
        self.retokenized_tokens = 0    # tokens rolled back and re-prefilled because of joins
        self._tail_start = cache.length
        self._tail_text = ""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._pre_tokenizer = getattr(backend, "pre_tokenizer", None) if backend is not None else None

    # -- state ------------------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self.cache.length

    @property
    def token_ids(self) -> list[int]:
        return self.cache.token_ids

    @property
    def forwards(self) -> int:
        return self.cache.forwards

    @property
    def tail_text(self) -> str:
        """Text appended since the last model-chosen token (tokenised canonically)."""
        return self._tail_text

    # -- tokenizer helpers ------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _pretoken_starts(self, text: str) -> set[int] | None:
        if self._pre_tokenizer is None:
            return None
        return {start for _, (start, _end) in self._pre_tokenizer.pre_tokenize_str(text)}

    def _window_start(self, tail: list[int]) -> tuple[int, int]:
        """(token index s in the tail, char index c in tail text): a clean cut before the join.

        Clean: tail[s:] decodes to exactly tail_text[c:], c is a pre-token start (BPE never merges
        across pre-tokens), and c is not inside the tail's last pre-token (only the last
        pre-tokens can change when text is appended). Falls back to (0, 0): the whole tail.
        """
        text = self._tail_text
        if self._pre_tokenizer is None or len(tail) <= self.window_tokens:
            return 0, 0
        look_back = 64  # chars of context before a cut, so the pre-tokenizer's regex is aligned there
        last_start: int | None = None
        for s in range(len(tail) - self.window_tokens, 0, -1):
            piece = self.decode(tail[s:])
            if not text.endswith(piece):  # the cut splits a character (byte-level tokens)
                continue
            c = len(text) - len(piece)
            lo = max(0, c - look_back)
            starts = self._pretoken_starts(text[lo:])
            if last_start is None:
                last_start = lo + max(starts) if starts else 0
            if c - lo in starts and c <= last_start:
                return s, c
            if len(tail) - s > 8 * self.window_tokens:
                break
        return 0, 0

    # -- appends ----------------------------------------------------------------------------------
    def append_text(self, text: str) -> torch.Tensor:
        """Append text, tokenised canonically with the tail before it; next-token logits [V]."""
        if not text:
            raise ValueError("append_text: empty text")
        tail = self.cache.token_ids[self._tail_start:]
        if not tail:
            ids = self.encode(text)
            logits = self.cache.append_span(ids)
            self._tail_text = text
            return logits
        self.joins += 1
        s, c = self._window_start(tail)
        while True:
            old = tail[s:]
            new = self.encode(self._tail_text[c:] + text)
            keep = _common_prefix(old, new)
            if keep > 0 or s == 0:
                break
            s, c = 0, 0  # the window's first token changed: re-tokenise the whole tail instead
        changed = len(old) - keep
        if changed:
            self.boundary_retokenized += 1
            self.retokenized_tokens += changed
            self.cache.rollback(changed)
        logits = self.cache.append_span(new[keep:])
        self._tail_text += text
        return logits

    def append_tokens(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Append model-chosen (or prompt) token ids as they are, in one forward; logits [V]."""
        logits = self.cache.append_span(token_ids)
        self._end_tail()
        return logits

    def step(self, token_id: int) -> torch.Tensor:
        """Append one model-chosen token; logits [V]."""
        logits = self.cache.step(token_id)
        self._end_tail()
        return logits

    def rollback(self, k: int) -> None:
        """Drop the last k tokens. Cutting into the tail freezes what is left of it."""
        self.cache.rollback(k)
        if k:
            self._end_tail()

    def _end_tail(self) -> None:
        self._tail_start = self.cache.length
        self._tail_text = ""
