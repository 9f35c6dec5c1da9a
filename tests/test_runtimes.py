"""Which runtime runs a model: "auto" (the default of the app and the CLI) picks llama.cpp only where
it can run the model on a CPU-only machine, torch everywhere else; a misspelt runtime is refused."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from backend.runtime import runtimes
from backend.runtime.runtimes import resolve_runtime


@pytest.fixture
def llama_cpp_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "llama_cpp" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("model, expected", [
    ("smollm2-135m", "llama.cpp"),             # the embedded GGUF
    ("smollm2-135m-cad", "llama.cpp"),         # an adapter over it: base GGUF + LoRA GGUF
    (None, "llama.cpp"),                       # models.yaml's default (the trained adapter)
    ("tiny-random", "torch"),                  # random-weight shape: no GGUF
    ("qwen2.5-coder-1.5b-instruct", "torch"),  # HF checkpoint: no GGUF
    ("/no/such/dir", "torch"),                 # ad hoc: torch says what is wrong with it
])
def test_auto_on_a_cpu_machine_with_llama_cpp(llama_cpp_installed, model, expected):
    assert resolve_runtime("auto", model) == expected


def test_auto_without_llama_cpp_or_with_cuda_is_torch(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    assert resolve_runtime("auto", "smollm2-135m") == "torch"
    monkeypatch.setattr(importlib.util, "find_spec", real)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_runtime("auto", "smollm2-135m") == "torch"


@pytest.mark.parametrize("runtime", ["torch", "llama.cpp"])
def test_a_named_runtime_is_kept(runtime):
    assert resolve_runtime(runtime, "tiny-random") == runtime


def test_unknown_runtime_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown runtime 'gpu': use one of auto, torch, llama.cpp"):
        resolve_runtime("gpu")
    assert runtimes.DEFAULT_RUNTIME == "auto"
