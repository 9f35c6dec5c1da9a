"""Token vocabularies for the grammar FSM (`backend.core.fsm`), from real tokenizers.

Each token becomes its text (its bytes decoded as UTF-8; a token that splits a character decodes
with U+FFFD, which the FSM allows only inside gen text) plus its raw bytes (so gen text comes out
exact). Special and added tokens are never allowed, except EOS. Ids past the vocabulary (models
pad their embedding, e.g. Qwen2.5's 151,936 rows) are never allowed either: pad the mask.

- `vocab_texts_from_hf(tokenizer)`: a transformers tokenizer (byte-level BPE, e.g. SmolLM2).
- `vocab_texts_from_tiktoken(encoding)`: a tiktoken encoding, e.g. `backend.tokenizers.qwen25_encoding()`.
- `vocabulary_from_hf` / `vocabulary_from_tiktoken`: the same as a `TokenVocabulary` with bytes.
- `measure_mask_cost(fsm, programs_token_ids, n_lines)`: `allowed()` timings, cached and uncached.

transformers and tiktoken are imported lazily, inside the functions that need them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any, Optional

from backend.core.fsm import TokenFSM
from backend.core.fsm_state import FSMState
from backend.core.token_vocabulary import TokenVocabulary
from backend.tokenizers import byte_level_alphabet, qwen25_encoding  # noqa: F401 (re-exported)



def _texts(token_bytes: Sequence[Optional[bytes]]) -> list[Optional[str]]:
    return [None if b is None else b.decode("utf-8", "replace") for b in token_bytes]


def hf_token_bytes(tokenizer: Any, *, eos_id: Optional[int] = None) -> tuple[list[Optional[bytes]], int]:
    """Raw bytes of every token of a transformers tokenizer (None for special/added tokens except
    EOS, which keeps its text's bytes) and the EOS id (default: `tokenizer.eos_token_id`).

    Byte-level BPE tokens map through GPT-2's byte alphabet; a token outside it (another kind of
    tokenizer) falls back to `convert_tokens_to_string`. Rejects a tokenizer without an EOS id
    when none is given (ValueError).
    """
    eos = tokenizer.eos_token_id if eos_id is None else eos_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id; pass eos_id=")
    size = len(tokenizer)
    added = set(getattr(tokenizer, "added_tokens_decoder", {}) or {}) | set(tokenizer.all_special_ids)
    decoder = byte_level_alphabet()
    pieces = tokenizer.convert_ids_to_tokens(list(range(size)))
    out: list[Optional[bytes]] = []
    for token_id, piece in enumerate(pieces):
        if token_id == eos:
            out.append(str(piece).encode("utf-8"))
        elif token_id in added or piece is None:
            out.append(None)
        elif all(ch in decoder for ch in piece):
            out.append(bytes(decoder[ch] for ch in piece))
        else:
            out.append(tokenizer.convert_tokens_to_string([piece]).encode("utf-8"))
    return out, eos


def vocab_texts_from_hf(tokenizer: Any, *, eos_id: Optional[int] = None) -> tuple[list[Optional[str]], int]:
    """Token texts of a transformers tokenizer and its EOS id (see `hf_token_bytes`)."""
    token_bytes, eos = hf_token_bytes(tokenizer, eos_id=eos_id)
    return _texts(token_bytes), eos


def vocabulary_from_hf(tokenizer: Any, *, eos_id: Optional[int] = None) -> TokenVocabulary:
    """A `TokenVocabulary` (texts and bytes) for a transformers tokenizer."""
    token_bytes, eos = hf_token_bytes(tokenizer, eos_id=eos_id)
    return TokenVocabulary(_texts(token_bytes), eos, token_bytes=token_bytes)


def tiktoken_token_bytes(encoding: Any, *, eos_token: str = "<|im_end|>") -> tuple[list[Optional[bytes]], int]:
    """Raw bytes of every id of a tiktoken encoding (None for special tokens and holes, except
    `eos_token`) and the EOS id. Rejects an encoding without `eos_token` (ValueError)."""
    special = set(encoding.special_tokens_set)
    if eos_token not in special:
        raise ValueError(f"encoding {encoding.name!r} has no special token {eos_token!r}")
    eos = encoding.encode_single_token(eos_token)
    special_ids = {encoding.encode_single_token(t) for t in special}
    out: list[Optional[bytes]] = []
    for token_id in range(encoding.max_token_value + 1):
        if token_id == eos:
            out.append(eos_token.encode("utf-8"))
            continue
        if token_id in special_ids:
            out.append(None)
            continue
        try:
            out.append(encoding.decode_single_token_bytes(token_id))
        except KeyError:
            out.append(None)
    return out, eos


def vocab_texts_from_tiktoken(encoding: Any, *, eos_token: str = "<|im_end|>") -> tuple[list[Optional[str]], int]:
    """Token texts of a tiktoken encoding and its EOS id (see `tiktoken_token_bytes`)."""
    token_bytes, eos = tiktoken_token_bytes(encoding, eos_token=eos_token)
    return _texts(token_bytes), eos


def vocabulary_from_tiktoken(encoding: Any, *, eos_token: str = "<|im_end|>") -> TokenVocabulary:
    """A `TokenVocabulary` (texts and bytes) for a tiktoken encoding."""
    token_bytes, eos = tiktoken_token_bytes(encoding, eos_token=eos_token)
    return TokenVocabulary(_texts(token_bytes), eos, token_bytes=token_bytes)


def _summary(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    p90 = statistics.quantiles(ordered, n=10)[8] if len(ordered) > 1 else ordered[0]
    return {
        "median_us": round(statistics.median(ordered) / 1000, 2),
        "p90_us": round(p90 / 1000, 2),
        "max_us": round(ordered[-1] / 1000, 2),
    }


def program_states(fsm: TokenFSM, programs_token_ids: Sequence[Sequence[int]], n_lines: int) -> list[FSMState]:
    """Every state the FSM passes through while reading the programs (token ids), the start
    included and the end excluded: the states a decoder masks at. ValueError for no programs or
    a program the FSM does not accept."""
    if not programs_token_ids:
        raise ValueError("no programs to measure")
    out = []
    for program in programs_token_ids:
        state = fsm.start(n_lines)
        out.append(state)
        for token_id in program:
            state = fsm.advance(state, token_id).state
            if state.mode != "end":
                out.append(state)
    return out


def measure_mask_cost(fsm: TokenFSM, programs_token_ids: Sequence[Sequence[int]], n_lines: int) -> dict:
    """Time `fsm.allowed()` at every step of the given programs (token ids; EOS optional), plus
    the step after the last token.

    Three passes: the first fills the caches (its wall time is `warmup_seconds`; on a fresh FSM
    it includes the per-vocabulary gen-text masks); "uncached" clears the state cache before each
    call (the per-vocabulary gen-text masks are kept: they are built once per tokenizer);
    "cached" times calls on warm caches, as in steady decoding. Rejects a program the FSM does
    not accept (ValueError) and an empty list of programs (ValueError).
    """
    all_states = program_states(fsm, programs_token_ids, n_lines)
    started = time.perf_counter()
    for state in all_states:
        fsm.allowed(state)
    warmup = time.perf_counter() - started
    clock = time.perf_counter_ns
    uncached = []
    for state in all_states:
        fsm.clear_state_cache()
        t0 = clock()
        fsm.allowed(state)
        uncached.append(clock() - t0)
    for state in all_states:
        fsm.allowed(state)
    cached = []
    for state in all_states:
        t0 = clock()
        fsm.allowed(state)
        cached.append(clock() - t0)
    cached_summary = _summary(cached)
    return {
        "vocab_size": len(fsm.vocabulary),
        "steps": len(all_states),
        "warmup_seconds": round(warmup, 4),
        "median_us": cached_summary["median_us"],
        "p90_us": cached_summary["p90_us"],
        "cached": cached_summary,
        "uncached": _summary(uncached),
    }
