"""A tiny deterministic fake model and a byte tokenizer, for fast decoder unit tests (nanochat's way).

`ByteTokenizer`: ids 0-255 are bytes, then `<|im_end|>` (EOS) and `<|im_start|>`; no chat template,
so the prompt module renders ChatML. With `split_special_tokens=True` the special strings stay text.

`FakeModel(script, cyclic=False)` implements `backend.runtime.handle.ModelHandle`; its caches
predict from the bytes the assistant has written so far (everything after the last `<|im_start|>`
and its role line): the longest suffix of them (up to 1024 bytes) found in `script` is continued with
the byte that follows it there. Nothing written yet: the script's first byte (EOS for an empty script). No match, or the end
of a non-cyclic script: EOS. A cyclic script wraps around, so the model repeats it forever.

So `FakeModel(context_text(ops, source))` writes exactly the program `ops` in the decoding layout
(copied text included, as the decoder puts it in the cache) and stops, and the grammar mask
decides whenever the script's byte is not allowed: logits rank the scripted token first (10.0),
then every other id by a small deterministic tie-break (lower ids first).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from backend.core.token_vocabulary import TokenVocabulary

BYTES = 256
EOS_ID = 256
IM_START_ID = 257
SPECIALS = {"<|im_end|>": EOS_ID, "<|im_start|>": IM_START_ID}
VOCAB_SIZE = 260  # two padded rows past the tokenizer, as Qwen pads its embedding
MAX_SUFFIX = 1024


class ByteTokenizer:
    """A transformers-like byte tokenizer: `__call__`, `decode`, `eos_token_id`, `__len__`."""

    eos_token_id = EOS_ID
    chat_template = None

    def __len__(self) -> int:
        return BYTES + len(SPECIALS)

    def __call__(self, text: str, *, add_special_tokens: bool = False, split_special_tokens: bool = False) -> dict:
        return {"input_ids": self.encode(text, split_special_tokens=split_special_tokens)}

    def encode(self, text: str, *, add_special_tokens: bool = False, split_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        rest = text
        while rest:
            special = None if split_special_tokens else next((s for s in SPECIALS if rest.startswith(s)), None)
            if special is not None:
                ids.append(SPECIALS[special])
                rest = rest[len(special):]
                continue
            ids.extend(rest[0].encode("utf-8"))
            rest = rest[1:]
        return ids

    def decode(self, ids: Sequence[int], **_options: Any) -> str:
        names = {v: k for k, v in SPECIALS.items()}
        out, run = [], bytearray()
        for token in ids:
            if token < BYTES:
                run.append(token)
                continue
            out.append(run.decode("utf-8", "replace"))
            run = bytearray()
            out.append(names.get(int(token), ""))
        out.append(run.decode("utf-8", "replace"))
        return "".join(out)


def byte_vocabulary() -> TokenVocabulary:
    """The grammar's vocabulary for ByteTokenizer: each byte's text and raw bytes; specials never
    allowed except EOS."""
    raw: list[bytes | None] = [bytes([b]) for b in range(BYTES)] + [b"<|im_end|>", None]
    texts = [None if r is None else r.decode("utf-8", "replace") for r in raw]
    return TokenVocabulary(texts, EOS_ID, token_bytes=raw)


def _written(token_ids: Sequence[int]) -> list[int]:
    """The assistant's bytes so far: after the last `<|im_start|>` and its role line."""
    ids = list(token_ids)
    if IM_START_ID in ids:
        ids = ids[len(ids) - ids[::-1].index(IM_START_ID):]
        if 10 in ids:  # the role line "assistant\n"
            ids = ids[ids.index(10) + 1:]
    return ids


@dataclass(frozen=True)
class Script:
    """The bytes the fake model wants to write; `cyclic`: repeat them forever instead of EOS."""

    text: bytes
    cyclic: bool

    def next_token(self, written: Sequence[int]) -> int:
        if not self.text:
            return EOS_ID
        if not written:
            return self.text[0]
        hay = self.text * (2 + MAX_SUFFIX // len(self.text)) if self.cyclic else self.text
        data = bytes(t for t in written[-MAX_SUFFIX:] if t < BYTES)
        for size in range(len(data), 0, -1):
            at = hay.find(data[-size:])
            if at != -1:  # the first occurrence; at the very end only when it is the only one
                return hay[at + size] if at + size < len(hay) else EOS_ID
        return EOS_ID


class FakeCache:
    """A `handle.DecodeCache` without a network: logits come from the script."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.token_ids: list[int] = []
        self.forwards = 0
        self.step_seconds: list[float] = []

    @property
    def length(self) -> int:
        return len(self.token_ids)

    def _logits(self) -> torch.Tensor:
        logits = -torch.arange(VOCAB_SIZE, dtype=torch.float32) * 1e-4
        logits[self.script.next_token(_written(self.token_ids))] = 10.0
        return logits

    def append_span_all(self, token_ids: Sequence[int], rows: int | None = None) -> torch.Tensor:
        if not token_ids:
            raise ValueError("empty span: nothing to append")
        if rows is not None and not 1 <= rows <= len(token_ids):
            raise ValueError(f"rows must be in 1..{len(token_ids)}, got {rows}")
        out = []
        for token in token_ids:
            self.token_ids.append(int(token))
            out.append(self._logits())
        self.forwards += 1
        return torch.stack(out[-rows:] if rows is not None else out)

    def append_span(self, token_ids: Sequence[int]) -> torch.Tensor:
        if not token_ids:
            raise ValueError("empty span: nothing to append")
        started = time.perf_counter()
        self.token_ids.extend(int(t) for t in token_ids)
        self.forwards += 1
        logits = self._logits()
        if len(token_ids) == 1:  # a decode step, timed as kv.SequenceCache times it
            self.step_seconds.append(time.perf_counter() - started)
        return logits

    def step(self, token_id: int) -> torch.Tensor:
        return self.append_span([token_id])

    def prefill(self, token_ids: Sequence[int], *, chunk: int = 256, cancel: Any = None) -> torch.Tensor | None:
        logits = None
        for start in range(0, len(token_ids), chunk):
            if cancel is not None and cancel.is_set():
                return None
            logits = self.append_span(token_ids[start:start + chunk])
        return logits

    def rollback(self, k: int) -> None:
        if k < 0 or k > self.length:
            raise ValueError(f"cannot roll back {k} of {self.length} positions")
        del self.token_ids[len(self.token_ids) - k:]

    def truncate(self, length: int) -> None:
        self.rollback(self.length - length)


@dataclass(frozen=True)
class FakeSpec:
    name: str = "fake"
    context_length: int = 1 << 16
    prompt: str = "few-shot"


@dataclass(frozen=True)
class FakeModel:
    """A `handle.ModelHandle` whose model writes `script` (see the module docstring)."""

    script_text: str
    cyclic: bool = False
    spec: Any = field(default_factory=FakeSpec)
    tokenizer: Any = field(default_factory=ByteTokenizer)
    device: Any = torch.device("cpu")
    dtype: Any = torch.float32
    weights_label: str = "fake"
    runtime: str = "fake"
    eos_ids: tuple[int, ...] = (EOS_ID,)
    load_seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def new_cache(self) -> FakeCache:
        return FakeCache(Script(self.script_text.encode("utf-8"), self.cyclic))
