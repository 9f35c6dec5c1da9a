"""Load a model onto this machine's best device: `load_model(name) -> LoadedModel`.

`LoadedModel` = HF model in eval mode + HF tokenizer + spec + device + dtype + weights label.
Device: CUDA in bfloat16 when available, else CPU in float32 with `torch.set_num_threads(os.cpu_count())`
(override: `threads=` or $COPY_AS_DECODE_THREADS). torch / transformers are imported lazily.

This module is also the runtime's one entry point for models: the specs (`model_specs`, `get_spec`,
`ModelSpec`, errors; backend/runtime/model_specs.py) and the weights (`usable_models`, the GGUF
conversion cache; backend/runtime/weights.py) are importable from here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.runtime.model_specs import (  # noqa: F401 (re-exported: the public names of models)
    MODELS_YAML,
    RANDOM_WEIGHTS,
    REAL_WEIGHTS,
    SOURCE_KINDS,
    ModelSource,
    ModelSpec,
    ModelUnavailable,
    UnknownModel,
    default_model_name,
    get_spec,
    model_specs,
    parse_models_yaml,
    spec_for,
    thaw,
)
from backend.runtime.weights import (  # noqa: F401 (re-exported)
    converted_dir,
    ensure_converted,
    gguf_path,
    merge_adapter,
    require_transformers,
    user_cache_dir,
    usable_models,
    weights_dir,
    weights_present,
)


@dataclass(frozen=True)
class LoadedModel:
    model: Any                      # transformers PreTrainedModel, eval mode, on `device`
    tokenizer: Any | None           # HF tokenizer; None for shape models without one
    spec: ModelSpec
    device: Any                     # torch.device
    dtype: Any                      # torch.dtype
    weights_label: str              # "real" | "random (timing only)"
    eos_ids: tuple[int, ...] = ()   # tokens that end a chat turn (<|im_end|>, eos)
    load_seconds: float = 0.0
    runtime: str = "torch"          # who runs the forwards (llamacpp.LlamaCppModel says "llama.cpp")

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def vocab_size(self) -> int:
        """Rows of the logits (the embedding matrix; Qwen pads it past the tokenizer's size)."""
        return int(self.model.config.get_text_config().vocab_size)

    def new_cache(self) -> Any:
        """An empty KV cache for one sequence (`kv.SequenceCache`, a `handle.DecodeCache`)."""
        from backend.runtime.kv import SequenceCache

        return SequenceCache(self.model)


def choose_device(device: Any = None) -> Any:
    """`device` as a torch.device; None -> CUDA when available, else CPU."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def set_cpu_threads(threads: int | None = None) -> int:
    """torch.set_num_threads(threads or $COPY_AS_DECODE_THREADS or os.cpu_count()); returns it."""
    import torch

    n = threads or int(os.environ.get("COPY_AS_DECODE_THREADS") or 0) or os.cpu_count() or 1
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def load_model(name_or_spec: str | ModelSpec, device: Any = None, *, threads: int | None = None) -> LoadedModel:
    """Load a models.yaml entry (or a save_pretrained directory) onto `device` (default: automatic).

    Raises UnknownModel for an unknown name and ModelUnavailable (saying what to install or
    download) when weights or packages are missing. CPU: sets the torch thread count.
    """
    import torch

    started = time.perf_counter()
    spec = spec_for(name_or_spec)
    device = choose_device(device)
    if device.type == "cpu":
        set_cpu_threads(threads)
    dtype = getattr(torch, spec.dtype_name(device.type))
    require_transformers()
    if spec.source.kind == "shape":
        model = _random_model(spec, device, dtype)
        tokenizer = _load_tokenizer_dir(weights_dir(get_spec(spec.tokenizer))) if spec.tokenizer else None
    else:
        folder = weights_dir(spec)
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).to(device)
            tokenizer = _load_tokenizer_dir(folder)
        except OSError as error:  # e.g. a hub snapshot holding config.json but not the weights
            raise ModelUnavailable(f"model {spec.name}: cannot load its files from {folder}: {error}") from None
        if spec.source.kind == "adapter":
            model = merge_adapter(model, spec)
    model.eval()
    return LoadedModel(
        model=model, tokenizer=tokenizer, spec=spec, device=device, dtype=dtype,
        weights_label=spec.weights_label, eos_ids=_eos_ids(model, tokenizer),
        load_seconds=time.perf_counter() - started,
    )


def load_hf_tokenizer(name_or_spec: str | ModelSpec) -> Any:
    """Only the HF tokenizer of an entry (shape entries: the one they borrow; None if they have none).
    Raises like load_model."""
    spec = spec_for(name_or_spec)
    if spec.random_weights:
        return load_hf_tokenizer(spec.tokenizer) if spec.tokenizer else None
    require_transformers()
    return _load_tokenizer_dir(weights_dir(spec))


def _load_tokenizer_dir(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _random_model(spec: ModelSpec, device: Any, dtype: Any) -> Any:
    """The entry's config with seeded random weights, built directly on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config_dict = thaw(spec.source.config)
    config = AutoConfig.for_model(**config_dict)
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device)


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []

    def add(value: Any) -> None:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, int) and v >= 0 and v not in ids:
                ids.append(v)

    if tokenizer is not None:
        add(tokenizer.eos_token_id)
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        if im_end != tokenizer.unk_token_id:
            add(im_end)
    generation = getattr(model, "generation_config", None)
    add(getattr(generation, "eos_token_id", None))
    if not ids:
        add(getattr(model.config, "eos_token_id", None))
    return tuple(ids)
