"""What a decoding strategy needs from a model: a typed handle and a KV cache it can append to.

Two Protocols, so a model served another way (llama.cpp, a remote engine) plugs into the decoder,
the baselines and the engine without their code asking what it is:

    loaded = load_model("smollm2-135m")      # models.LoadedModel implements ModelHandle
    cache = loaded.new_cache()                # a DecodeCache: kv.SequenceCache for torch models
    logits = cache.append_span(prompt_ids)    # float32 torch tensor [V] after the last token

`DecodeCache` is the interface of `backend.runtime.kv.SequenceCache`: it counts every forward
(`forwards`), mirrors the cache's tokens (`token_ids`, `length`) and returns float32 torch logits
(on any device; the grammar builds its masks on `ModelHandle.device`). `rollback(k)` drops the last
k positions; `truncate(n)` keeps the first n; `prefill` appends a prompt in chunks, checking a
cancel flag between them; `step_seconds` times every one-token forward (a run's own step time).

`PromptReuse` wraps a handle for interactive use: a new run gets the last run's cache back and
`reuse_prompt_prefix` keeps the positions its prompt shares with it, so a second edit of a file
does not read the file again (on a 2-core CPU the numbered input of a 300-line file takes ~20 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from backend.runtime.models import ModelSpec


@runtime_checkable
class DecodeCache(Protocol):
    """One sequence's KV cache: every append is one forward, counted in `forwards`."""

    token_ids: list[int]       # the tokens the cache holds, in order
    forwards: int              # forward passes run so far (the prompt prefill included)
    step_seconds: list[float]  # wall seconds of every one-token forward, in order

    @property
    def length(self) -> int: ...

    def step(self, token_id: int) -> torch.Tensor:
        """Append one token; the next-token logits [V]."""
        ...

    def append_span(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Append N tokens in one forward; the logits [V] after the last of them."""
        ...

    def prefill(self, token_ids: Sequence[int], *, chunk: int = 256, cancel: Any = None) -> torch.Tensor | None:
        """Append N tokens in forwards of at most `chunk` tokens; the logits [V] after the last, or
        None when `cancel.is_set()` before a chunk (the chunks done stay in the cache)."""
        ...

    def append_span_all(self, token_ids: Sequence[int], rows: int | None = None) -> torch.Tensor:
        """Append N tokens in one forward; logits [N, V], row i predicting the token after token i
        (`rows`: only the last `rows` rows, [rows, V]; 1 <= rows <= N else ValueError)."""
        ...

    def rollback(self, k: int) -> None:
        """Drop the last k positions (0 is a no-op; more than `length` raises ValueError)."""
        ...

    def truncate(self, length: int) -> None:
        """Keep the first `length` positions."""
        ...


@runtime_checkable
class ModelHandle(Protocol):
    """A loaded model as the runtime sees it (`models.LoadedModel`, the llama.cpp handle, ...).

    `tokenizer` is a transformers tokenizer (None for timing-only shape models, which cannot decode
    text); `vocab_size` is the logits' width (Qwen pads it past the tokenizer); `eos_ids` end a
    chat turn; `spec` is the models.yaml entry (name, context_length, prompt style, ...).
    """

    tokenizer: Any
    spec: ModelSpec
    device: Any
    dtype: Any
    weights_label: str
    eos_ids: tuple[int, ...]
    load_seconds: float
    runtime: str                    # "torch", "llama.cpp", ...: shown with results and in the app

    @property
    def name(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    def new_cache(self) -> DecodeCache:
        """An empty cache for one sequence on this model."""
        ...


def reuse_prompt_prefix(cache: DecodeCache, prompt_ids: Sequence[int]) -> int:
    """Keep what the cache holds of `prompt_ids`' beginning and drop the rest: how many positions were
    kept (0 for an empty cache). At most all but the prompt's last token stay: the logits after the
    prompt need one forward. A cache a previous run left holds that run's prompt and output; an edit
    of the same file with another instruction shares its prompt up to the instruction (the input
    comes first), a later edit of the edited file up to the first changed line."""
    held, limit = cache.token_ids, min(cache.length, len(prompt_ids) - 1)
    kept = 0
    while kept < limit and held[kept] == prompt_ids[kept]:
        kept += 1
    if kept < cache.length:
        cache.truncate(kept)
    return kept


def prefill_prompt(cache: DecodeCache, prompt_ids: Sequence[int], cancel: Any = None) -> tuple[torch.Tensor | None, int]:
    """The prompt into the cache, after what `reuse_prompt_prefix` keeps of it (nothing in a fresh
    cache): (the logits [V] after the prompt or None when cancelled first, the positions kept).

    Without a cancel flag: one forward (as `append_span`: a benchmark's numbers do not depend on a
    chunk size). With one: forwards of 256 tokens, the flag checked before each, so a cancel during
    a long prompt takes effect within one chunk (a 6.9k-character input took 8.5 s to prefill)."""
    kept = reuse_prompt_prefix(cache, prompt_ids)
    rest = prompt_ids[kept:]
    if cancel is None:
        return cache.prefill(rest, chunk=max(1, len(rest))), kept
    return cache.prefill(rest, cancel=cancel), kept


class PromptReuse:
    """A ModelHandle whose `new_cache()` hands back the cache it gave last, while that cache still
    holds its model's context, so that `reuse_prompt_prefix` can keep the prompt positions the next
    run shares with the last one. For one runner at a time (the engine's lock): the interactive
    app, where the same file is edited again and again. A measurement wants cold prompts: the
    benchmarks and `evaluate` use the plain handle. Everything else is the wrapped handle's."""

    def __init__(self, loaded: ModelHandle) -> None:
        self.loaded = loaded
        self._last: DecodeCache | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loaded, name)

    def new_cache(self) -> DecodeCache:
        last = self._last
        if last is None or not getattr(last, "reusable", False):  # a cache without the flag is never reused
            last = self._last = self.loaded.new_cache()
        return last
