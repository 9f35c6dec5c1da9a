"""llama.cpp in-process: the fast CPU runtime, behind the same cache interface as `kv.SequenceCache`.

llama-cpp-python's low-level API gives exactly the copy primitive: one `llama_decode` evaluates a
batch of N known tokens into the KV cache, `llama_get_logits` returns the rows asked for, and
`llama_memory_seq_rm` drops cache entries (rollback). So

    step(t)              # batch of 1, logits of it                  -> float32 [V]
    append_span(ts)      # batch of N, logits of the last token only -> float32 [V]
    append_span_all(ts)  # batch of N, logits of every token         -> float32 [N, V]
    rollback(k)          # llama_memory_seq_rm(seq 0, from length - k)

and the decoder, the baselines and the token FSM's masks run unchanged on its logits (torch CPU
tensors; the masks cost the same as on the PyTorch runtime: they never touch the model).

Measured here (2 threads, embedded Q4_1 GGUF, 512-token context; STACK.md): a decode step takes
~7 ms against ~55 ms for our float32 PyTorch step, and one batched eval of N tokens is 2.3x (N=8)
to 3.0x (N=128) faster than N steps: the copy kernel still pays, less than on PyTorch (6-19x).

One llama.cpp context per loaded model; a cache owns it while in use. `new_cache()` clears the
context and hands it to a new `LlamaCppCache`; a cache that lost the context raises on use
(the engine runs one sequence at a time, under its lock). Tokens are our HF tokenizer's ids:
it is read from the same GGUF file, so ids agree with llama.cpp's own vocabulary.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import torch

from backend.runtime.kv import tail_rows
from backend.runtime.llamacpp_repack import model_params
from backend.runtime.models import (
    REAL_WEIGHTS,
    ModelSpec,
    ModelUnavailable,
    _eos_ids,
    spec_for,
    get_spec,
    gguf_path,
    load_hf_tokenizer,
    user_cache_dir,
)

RUNTIME_NAME = "llama.cpp"
LLAMA_CPP_PIN = "llama-cpp-python[server]==0.3.36"
INSTALL_HINT = f"pip install '{LLAMA_CPP_PIN}' (builds llama.cpp from source: ~8 CPU-minutes once)"
# Tokens per llama_decode call inside llama.cpp (physical batch). A logical batch (one forward of
# ours) may be longer: llama.cpp splits it into micro-batches of this size itself.
UBATCH = 512
# Flash attention: llama.cpp's "auto" (the default) turns it on wherever the backend supports it, the
# CPU included; $COPY_AS_DECODE_FLASH_ATTN (on, off, auto) overrides. Neither wins everywhere on a
# 2-core AVX2 CPU (SmolLM2, docs/results.md): without it a decode step after 2,500 tokens costs
# ~33 ms against ~37-40 ms and one 177-line file's replay decodes 1.15x (copy-as-decode) to 1.5x
# (tuned prompt lookup) faster, but short prompts read ~27% slower (80 held-out edits of <= 768
# tokens: 246 s against 193 s of prefill) and 17 of those 80 programs change (exact 18 against 19).
# Model mode on the app's files is mostly prompt reading, and "auto" is what the shipped adapter
# was evaluated with: it stays the default.
FLASH_ATTN_ENV = "COPY_AS_DECODE_FLASH_ATTN"


def require_llama_cpp() -> Any:
    """The llama_cpp module; ModelUnavailable (saying how to install it) when it is missing."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ModelUnavailable(f"the llama.cpp runtime needs llama-cpp-python: {INSTALL_HINT}")
    import llama_cpp
    from llama_cpp import _logger

    _logger.set_verbose(False)  # llama.cpp logs every tensor it loads to stderr otherwise
    return llama_cpp


def llama_threads(threads: int | None = None) -> int:
    """threads or $COPY_AS_DECODE_THREADS or os.cpu_count() (as the PyTorch runtime chooses)."""
    return threads or int(os.environ.get("COPY_AS_DECODE_THREADS") or 0) or os.cpu_count() or 1


@dataclass
class LlamaCppModel:
    """A GGUF model loaded into llama.cpp: the handle the decoder, baselines and engine take.

    Same fields as `models.LoadedModel` where they mean the same thing (tokenizer, spec, device,
    dtype of the logits, weights_label, eos_ids, load_seconds, name, vocab_size); `model` is None
    (there is no torch module); `new_cache()` gives the KV-cache owner.
    """

    llama_model: Any                # llama_cpp._internals.LlamaModel
    context: Any                    # llama_cpp._internals.LlamaContext (one per handle)
    tokenizer: Any                  # HF tokenizer read from the same GGUF: same ids
    spec: ModelSpec
    gguf: Path
    threads: int
    n_ctx: int
    lora: Path | None = None
    load_seconds: float = 0.0
    weights_label: str = REAL_WEIGHTS
    eos_ids: tuple[int, ...] = ()
    model: Any = None
    runtime: str = RUNTIME_NAME
    device: Any = field(default_factory=lambda: torch.device("cpu"))
    dtype: Any = torch.float32
    _owner: object | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def vocab_size(self) -> int:
        """Rows of the logits (llama.cpp's n_vocab)."""
        return int(self.llama_model.n_vocab())

    def new_cache(self) -> "LlamaCppCache":
        """An empty cache owning this model's context (any earlier cache stops working)."""
        return LlamaCppCache(self)

    def _claim(self, owner: object) -> None:
        with self._lock:
            self.context.kv_cache_clear()
            self._owner = owner

    def close(self) -> None:
        """Free the llama.cpp context and weights (the handle is unusable afterwards)."""
        self.context.close()
        self.llama_model.close()


class LlamaCppCache:
    """One sequence in a llama.cpp context; `token_ids` mirrors the KV cache. Same contract as
    `kv.SequenceCache`: rejects empty spans, rollback of more than `length` or a negative count
    (ValueError), an append past the context size (ValueError), and use after another cache took
    the context (RuntimeError). Logits are float32 CPU tensors (copies: llama.cpp reuses its buffer).
    """

    def __init__(self, handle: LlamaCppModel) -> None:
        self._handle = handle
        self._ctx = handle.context
        self._n_vocab = handle.vocab_size
        self._batch: Any = None
        self.token_ids: list[int] = []
        self.forwards = 0
        self.step_seconds: list[float] = []  # wall seconds of every one-token forward (as kv.SequenceCache)
        handle._claim(self)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def reusable(self) -> bool:
        """True while this cache still owns the model's context (a newer cache takes it, and this one
        then refuses every use), so a later run may keep a prefix of it (handle.PromptReuse)."""
        return self._handle._owner is self

    def _check_owner(self) -> None:
        if self._handle._owner is not self:
            raise RuntimeError("this llama.cpp cache was superseded: its context now belongs to a newer cache")

    def _ensure_batch(self, n: int) -> Any:
        if self._batch is None or self._batch._n_tokens < n:
            from llama_cpp import _internals

            size = max(n, 64 if self._batch is None else 2 * self._batch._n_tokens)
            self._batch = _internals.LlamaBatch(n_tokens=size, embd=0, n_seq_max=1, verbose=False)
        return self._batch

    def _forward(self, token_ids: Sequence[int], all_logits: bool, tail: int | None = None) -> torch.Tensor:
        # batch: N tokens at positions length..length+N-1; returns logits [rows, V]: the last `tail`
        # rows (all N when all_logits and tail is None, else 1)
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("empty span: nothing to append")
        rows = tail_rows(len(ids), tail) if all_logits else 1
        self._check_owner()
        if self.length + len(ids) > self._handle.n_ctx:
            raise ValueError(f"the context is full: {self.length} + {len(ids)} > {self._handle.n_ctx} tokens")
        batch = self._ensure_batch(len(ids))
        raw = batch.batch
        raw.n_tokens = len(ids)
        start = self.length
        for i, token in enumerate(ids):
            raw.token[i] = token
            raw.pos[i] = start + i
            raw.n_seq_id[i] = 1
            raw.seq_id[i][0] = 0
            raw.logits[i] = i >= len(ids) - rows
        self._ctx.decode(batch)  # RuntimeError on failure; the cache then holds nothing new
        out = np.ctypeslib.as_array(self._ctx.get_logits(), shape=(rows, self._n_vocab))
        logits = torch.from_numpy(out.copy())
        self.forwards += 1
        self.token_ids.extend(ids)
        return logits

    def step(self, token_id: int) -> torch.Tensor:
        """Append one token; the next-token logits [V]."""
        started = time.perf_counter()
        logits = self._forward([token_id], False)[0]
        self.step_seconds.append(time.perf_counter() - started)
        return logits

    def prefill(self, token_ids: Sequence[int], *, chunk: int = 256, cancel: Any = None) -> torch.Tensor | None:
        """Append a prompt in chunks of `chunk` tokens (one forward each), checking `cancel` (anything
        with is_set()) before each: the logits [V] after the last token, or None when cancelled (the
        cache keeps the chunks done). Rejects an empty span or chunk < 1 (ValueError)."""
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("empty span: nothing to append")
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, not {chunk}")
        logits = None
        for start in range(0, len(ids), chunk):
            if cancel is not None and cancel.is_set():
                return None
            logits = self._forward(ids[start:start + chunk], False)[0]
        return logits

    def append_span(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Append N tokens in one batched eval; the logits [V] after the last of them."""
        return self._forward(token_ids, False)[0]

    def append_span_all(self, token_ids: Sequence[int], rows: int | None = None) -> torch.Tensor:
        """Append N tokens in one batched eval; logits [N, V], row i predicting the token after token i
        (`rows`: only the last `rows` of them, [rows, V])."""
        return self._forward(token_ids, True, rows)

    def rollback(self, k: int) -> None:
        """Drop the last k positions (k = 0 is a no-op)."""
        if k < 0 or k > self.length:
            raise ValueError(f"cannot roll back {k} of {self.length} positions")
        if k == 0:
            return
        self._check_owner()
        if not self._ctx.kv_cache_seq_rm(0, self.length - k, -1):
            raise RuntimeError(f"llama.cpp refused to remove the last {k} cache positions")
        del self.token_ids[-k:]

    def truncate(self, length: int) -> None:
        """Roll back to `length` positions."""
        self.rollback(self.length - length)


def flash_attention_type(llama_cpp: Any) -> int:
    """llama.cpp's flash_attn_type for a new context: $COPY_AS_DECODE_FLASH_ATTN (on, off, auto) when
    set, else auto (see FLASH_ATTN_ENV). ValueError for another value of the variable."""
    choices = {
        "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    }
    chosen = os.environ.get(FLASH_ATTN_ENV, "").strip().lower() or "auto"
    if chosen not in choices:
        raise ValueError(f"${FLASH_ATTN_ENV} must be one of {', '.join(choices)}, not {chosen!r}")
    return choices[chosen]


def _context_params(llama_cpp: Any, n_ctx: int, threads: int) -> Any:
    params = llama_cpp.llama_context_default_params()
    params.flash_attn_type = flash_attention_type(llama_cpp)
    params.n_ctx = n_ctx
    params.n_batch = n_ctx      # one llama_decode per forward of ours, whatever its length
    params.n_ubatch = min(UBATCH, n_ctx)
    params.n_seq_max = 1
    params.n_threads = threads
    params.n_threads_batch = threads
    return params


def _attach_lora(llama_cpp: Any, llama_model: Any, context: Any, lora: Path, scale: float) -> Any:
    adapter = llama_cpp.llama_adapter_lora_init(llama_model.model, str(lora).encode("utf-8"))
    if adapter is None:
        raise ModelUnavailable(f"llama.cpp could not load the LoRA adapter {lora} (wrong base model or not a LoRA GGUF)")
    adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter)
    scales = (llama_cpp.ctypes.c_float * 1)(scale)
    if llama_cpp.llama_set_adapters_lora(context.ctx, adapters, 1, scales):
        llama_cpp.llama_adapter_lora_free(adapter)
        raise ModelUnavailable(f"llama.cpp could not apply the LoRA adapter {lora}")
    llama_model._exit_stack.callback(lambda: llama_cpp.llama_adapter_lora_free(adapter))
    return adapter


def gguf_files(spec: ModelSpec, *, merge: bool = True) -> tuple[Path, Path | None]:
    """(model GGUF, LoRA GGUF or None) of an entry: a gguf-package entry is its file; an adapter
    entry is, by default, its base's file with the peft adapter merged in (`merged_gguf`, F16
    merged weights, the closest to the PyTorch model the adapter was trained on; merged as Q8_0,
    against llama.cpp's run-time LoRA over Q4_1, copy-as-decode's decode was 1.36x and the prompt
    prefill 1.76x faster on a 2-core CPU; docs/results.md), or with `merge=False` the base's file
    plus the adapter as a LoRA GGUF. Both are converted once and cached under the user cache dir, keyed by the adapter files' contents.
    ModelUnavailable for other kinds."""
    if spec.source.kind == "gguf-package":
        return gguf_path(spec), None
    if spec.source.kind == "adapter" and spec.source.base:
        base, _ = gguf_files(get_spec(spec.source.base))
        if merge:
            return cached_adapter_gguf(spec, base, "merged"), None
        return base, cached_adapter_gguf(spec, base, "lora")
    raise ModelUnavailable(
        f"model {spec.name} has no GGUF file: the llama.cpp runtime runs GGUF models "
        "(convert it with llama.cpp's convert_hf_to_gguf.py and pass the file)"
    )


def cache_file_name(model_name: str, digest: str, suffix: str) -> str:
    """One file name in the cache dir for a model name that may be a path (`--model var/run` or
    `../x`): every character outside [A-Za-z0-9._-] becomes "_", so it never names a folder."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name).strip("._") or "model"
    return f"{stem}-{digest}{suffix}.gguf"


def cached_adapter_gguf(spec: ModelSpec, base_gguf: Path, form: str) -> Path:
    """The entry's peft adapter for llama.cpp, converted on first use: `form` "lora" a LoRA GGUF
    (~1 s), "merged" the base GGUF with the adapter merged in (`merged_gguf`, ~4 s, 244 MB)."""
    from backend.runtime.lora_gguf import lora_gguf_from_peft
    from backend.runtime.merged_gguf import DEFAULT_MERGED_TYPE, merged_gguf_from_peft

    adapter = spec.adapter_dir
    if adapter is None or not (adapter / "adapter_config.json").is_file():
        raise ModelUnavailable(f"model {spec.name}: no LoRA adapter at {adapter}; train one with `python -m backend train`")
    digest = hashlib.sha256(base_gguf.name.encode())
    for file in sorted(adapter.iterdir()):
        if file.name.startswith("adapter_"):
            digest.update(file.name.encode() + file.read_bytes())
    suffix = "" if form == "lora" else f"-merged-{DEFAULT_MERGED_TYPE}"
    out = user_cache_dir() / "lora" / cache_file_name(spec.name, digest.hexdigest()[:16], suffix)
    if not out.is_file():
        try:
            if form == "lora":
                lora_gguf_from_peft(adapter, base_gguf, out)
            else:
                merged_gguf_from_peft(adapter, base_gguf, out)
        except ValueError as error:
            raise ModelUnavailable(f"model {spec.name}: its adapter cannot run on llama.cpp: {error}") from None
    return out


def load_llamacpp(
    name_or_spec: str | ModelSpec,
    *,
    gguf: str | os.PathLike[str] | None = None,
    lora: str | os.PathLike[str] | None = None,
    lora_scale: float = 1.0,
    threads: int | None = None,
    n_ctx: int | None = None,
) -> LlamaCppModel:
    """Load a models.yaml entry into llama.cpp (its GGUF file; `gguf` overrides the file).

    Adapter entries (a peft LoRA on a GGUF entry) load as their merged GGUF (`gguf_files`).
    `lora`: a llama.cpp LoRA GGUF (see `backend.runtime.lora_gguf`) applied at `lora_scale`.
    Raises UnknownModel / ModelUnavailable (missing llama-cpp-python, no GGUF for the entry, a
    file llama.cpp cannot load).
    """
    llama_cpp = require_llama_cpp()
    from llama_cpp import _internals

    started = time.perf_counter()
    spec = spec_for(name_or_spec)
    if gguf is None:
        gguf, entry_lora = gguf_files(spec)
        lora = lora if lora is not None else entry_lora
    gguf = Path(gguf)
    threads = llama_threads(threads)
    n_ctx = int(n_ctx or spec.context_length)
    params = model_params(llama_cpp)  # a bad $COPY_AS_DECODE_LLAMA_REPACK is its own error, not "cannot load"
    try:
        llama_model = _internals.LlamaModel(path_model=str(gguf), params=params, verbose=False)
        context = _internals.LlamaContext(model=llama_model, params=_context_params(llama_cpp, n_ctx, threads), verbose=False)
    except ValueError as error:
        raise ModelUnavailable(f"llama.cpp cannot load {gguf}: {error}") from None
    if lora is not None:
        _attach_lora(llama_cpp, llama_model, context, Path(lora), lora_scale)
    tokenizer = load_hf_tokenizer(spec)
    stub = SimpleNamespace(generation_config=None, config=SimpleNamespace(eos_token_id=llama_model.token_eos()))
    return LlamaCppModel(
        llama_model=llama_model, context=context, tokenizer=tokenizer, spec=spec, gguf=gguf, threads=threads,
        n_ctx=n_ctx, lora=Path(lora) if lora is not None else None, eos_ids=_eos_ids(stub, tokenizer),
        load_seconds=time.perf_counter() - started,
    )
