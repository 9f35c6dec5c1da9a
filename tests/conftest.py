"""Shared fixtures.

- `tiny_model`: the `tiny-random` entry (2-layer, hidden-64 Llama, random weights, the real SmolLM2
  tokenizer) on CPU in float32: ~1 s to load, a forward in milliseconds. For logic tests.
- `smol_model`: the embedded SmolLM2-135M-Instruct on CPU in float32 (the first run ever converts
  its GGUF into the user cache, ~25-35 s; later loads ~3 s). For truth on a real model.

Both are session-scoped and shared: treat them as read-only (build your own SequenceCache).
CPU threads: load_model sets torch to os.cpu_count() threads unless $COPY_AS_DECODE_THREADS says
otherwise.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model():
    from backend.runtime.models import load_model

    return load_model("tiny-random", "cpu")


@pytest.fixture(scope="session")
def smol_model():
    from backend.runtime.models import load_model

    return load_model("smollm2-135m", "cpu")
