"""Which runtime runs a model: PyTorch or llama.cpp in this process, or a remote inference server.

    load_runtime(model, runtime="auto" | "torch" | "llama.cpp")   -> a loaded model handle
    open_engine(model, runtime=..., engine_url=None, engine_kind=None) -> an EditEngine

The CLI (`--runtime`, `--engine-url`, `--engine-kind`), the app and the benchmark all go through
these two functions, so a new runtime is one branch here. Each backend is imported only in its own
branch (llama-cpp-python is optional at import time).
"""

from __future__ import annotations

from typing import Any

RUNTIMES = ("torch", "llama.cpp")
AUTO = "auto"
RUNTIME_CHOICES = (AUTO, *RUNTIMES)
DEFAULT_RUNTIME = AUTO
AUTO_HELP = ("auto (default): llama.cpp on a machine without CUDA when llama-cpp-python is installed and the model "
             "has a GGUF file (its decode step is ~5x faster than PyTorch's on a CPU, docs/bench.md), else torch")


def check_runtime(runtime: str) -> str:
    """`runtime` if known (including "auto"); ValueError naming the choices otherwise."""
    if runtime not in RUNTIME_CHOICES:
        raise ValueError(f"unknown runtime {runtime!r}: use one of {', '.join(RUNTIME_CHOICES)}")
    return runtime


def resolve_runtime(runtime: str, model: str | None = None) -> str:
    """The concrete runtime that runs `model` (default: the default entry): `runtime` itself unless
    it is "auto", which picks llama.cpp when it can run the model on a CPU-only machine (measured the
    faster CPU runtime: plain step 11.7 ms against 60.9 ms, copy-as-decode 7.2 s against 8.6 s on a
    commit edit, docs/bench.md) and torch otherwise: CUDA present, llama-cpp-python not installed,
    or a model without a GGUF file (HF checkpoints, random-weight shapes)."""
    if check_runtime(runtime) != AUTO:
        return runtime
    return "llama.cpp" if _llama_cpp_can_run(model) else "torch"


def _llama_cpp_can_run(model: str | None) -> bool:
    import importlib.util

    import torch

    from backend.runtime.models import default_model_name, get_spec, spec_for

    if torch.cuda.is_available() or importlib.util.find_spec("llama_cpp") is None:
        return False
    try:
        spec = spec_for(model or default_model_name())
    except Exception:  # noqa: BLE001 - an unknown name or an unusable directory: torch reports it
        return False
    while spec.source.kind == "adapter" and spec.source.base:
        spec = get_spec(spec.source.base)
    return spec.source.kind == "gguf-package"


def load_runtime(model: str | None = None, runtime: str = DEFAULT_RUNTIME, *, threads: int | None = None) -> Any:
    """The models.yaml entry `model` (default: the default entry) loaded by `runtime`.

    torch -> `models.LoadedModel`; llama.cpp -> `llamacpp.LlamaCppModel` (GGUF entries; a LoRA
    adapter entry is merged once into a copy of its base GGUF). Raises ValueError for an unknown
    runtime, UnknownModel / ModelUnavailable like `models.load_model`.
    """
    from backend.runtime.models import default_model_name

    name = model or default_model_name()
    if resolve_runtime(runtime, name) == "llama.cpp":
        from backend.runtime.llamacpp import load_llamacpp

        return load_llamacpp(name, threads=threads)
    from backend.runtime.models import load_model

    return load_model(name, threads=threads)


def open_engine(
    model: str | None = None,
    *,
    runtime: str = DEFAULT_RUNTIME,
    engine_url: str | None = None,
    engine_kind: str | None = None,
    threads: int | None = None,
    limits: Any = None,
    reuse_prompt: bool = False,
    copy_rest: bool = True,
    avoid_noops: bool = False,
    search_branches: int = 0,
    align_snippets: bool = True,
    guard_shapes: bool = True,
    forward_copies: bool = True,
) -> Any:
    """An EditEngine: on a remote server when `engine_url` is given (then `engine_kind` is needed
    and `runtime` is ignored), else on `load_runtime(model, runtime)`. `limits`: an EditLimits
    (default: the engine's). `reuse_prompt`, `copy_rest`: see `EditEngine` (a server keeps its own
    prompt cache; a remote engine copies the rest on the client, after the server's end).
    `avoid_noops`, `search_branches`: see `EditEngine`; in process only (a server chooses its own
    tokens). `guard_shapes`: see `EditEngine`; on a server by the request's grammar (remote_shape.py). `align_snippets`: see `EditEngine`; on a server a merge is streamed without a request.
    `forward_copies`: see `EditEngine`; on a server by each request's grammar (remote.py)."""
    from backend.runtime.request import EditLimits

    limits = limits or EditLimits()
    if engine_url:
        from backend.runtime.remote_client import CompletionsClient
        from backend.runtime.remote_engine import RemoteEditEngine

        if not engine_kind:
            raise ValueError("--engine-url needs --engine-kind (vllm, sglang or llamacpp)")
        if avoid_noops:
            raise ValueError("--refuse-noops works in process only: a server chooses its own tokens")
        if search_branches:
            raise ValueError("--search works in process only: it needs the model's log-probabilities at every step")
        return RemoteEditEngine(CompletionsClient(engine_url, engine_kind), model=model, limits=limits, copy_rest=copy_rest,
                                align_snippets=align_snippets, guard_shapes=guard_shapes, forward_copies=forward_copies)
    from backend.runtime.engine import EditEngine

    return EditEngine(load_runtime(model, runtime, threads=threads), limits=limits, reuse_prompt=reuse_prompt,
                      copy_rest=copy_rest, avoid_noops=avoid_noops, search_branches=search_branches,
                      align_snippets=align_snippets, guard_shapes=guard_shapes, forward_copies=forward_copies)
