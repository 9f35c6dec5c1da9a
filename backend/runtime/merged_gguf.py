"""A peft LoRA adapter merged into a copy of its base GGUF: one model file, no LoRA at run time.

llama.cpp applies a LoRA GGUF as extra graph nodes in every adapted matmul (A x, B (A x), scale,
add: 7 modules x 30 layers for SmolLM2). Merging removes them: W' = W + (alpha / r) B A, written
back as F16 (below). Measured with Q8_0 on a 2-core AVX2 CPU against the LoRA GGUF over the Q4_1 base
(docs/results.md): copy-as-decode's decode 1.36x and the prompt prefill 1.76x faster end to end;
single forwards: a decode step 1.16x, a 128-token forward 1.6x, a 1,000-token prefill 1.9x
(Q8_0 has llama.cpp's tiled CPU matmul for batches; Q4_1 falls back to row-by-row dots).

The file is the base GGUF byte for byte (header, metadata, every tensor the adapter does not
touch) except the adapted weights, which are de-quantised, merged and stored again as `qtype`.
F16 by default: the merged weights then stay what the adapter was trained against (the de-quantised
Q4_1 base plus the adapter's delta) up to F16's rounding. Re-quantising them as Q4_1 adds a second
4-bit rounding, which moved the logits as far as dropping the adapter; Q8_0 (the default until
2026-12-06) is 16x finer, but on 160 held-out dev cases the shipped adapter wrote 5 more exact
programs merged as F16 than as Q8_0 and lost none, for 1.15x the decode and 1.12x the prefill time
on the programs both wrote alike (a 2-core AVX2 CPU; docs/results.md, "The merged weights'
precision"). The metadata is copied as raw bytes, so nothing re-parses the 49k-entry vocabulary
(gguf.GGUFReader would). The rows of q/k B are permuted as in `lora_gguf`.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from backend.runtime.lora_gguf import _base_facts, _check_config, _Header, _read_adapter, adapter_tensors, lora_alpha

DEFAULT_MERGED_TYPE = "F16"


def _gguf_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _pad(length: int, alignment: int) -> int:
    return -length % alignment


def merged_deltas(adapter_dir: Path, facts: dict) -> dict[str, np.ndarray]:
    """GGUF weight name -> the float32 update (alpha / r) B A, shaped [out, in] like the weight."""
    config, tensors = _read_adapter(adapter_dir)
    _check_config(config)
    scale = lora_alpha(config) / int(config["r"])  # peft's scale, rsLoRA included
    converted = adapter_tensors(config, tensors, facts)
    if not converted:
        raise ValueError(f"{adapter_dir}: the adapter holds no LoRA weights")
    deltas = {}
    for name in converted:
        if name.endswith(".lora_a"):
            weight = name[: -len(".lora_a")]
            deltas[weight] = scale * (converted[weight + ".lora_b"] @ converted[name])
    return deltas


def merged_gguf_from_peft(
    adapter_dir: str | os.PathLike[str],
    base_gguf: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    qtype: str = DEFAULT_MERGED_TYPE,
) -> Path:
    """Write `base_gguf` with the peft adapter in `adapter_dir` merged into its weights; returns
    out_path. Adapted weights are stored as `qtype` (a gguf quantisation gguf-py can write: Q8_0,
    Q4_1, F16, ...). Written to a temporary sibling and renamed into place. ValueError for an
    adapter that does not fit the base (see lora_gguf) or a qtype gguf-py cannot write."""
    import gguf

    adapter_dir, base_gguf, out_path = Path(adapter_dir), Path(base_gguf), Path(out_path)
    try:
        target = gguf.GGMLQuantizationType[qtype]
    except KeyError:
        raise ValueError(f"unknown GGUF tensor type {qtype!r}") from None
    header = _Header(base_gguf)
    deltas = merged_deltas(adapter_dir, _base_facts(base_gguf, header))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")  # unique: two processes may convert at once
    try:
        with open(base_gguf, "rb") as handle, open(tmp, "wb") as out:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                blobs = [_tensor_bytes(gguf, data, header, tensor, deltas, target) for tensor in header.tensors]
                _write(out, data, header, blobs)
            finally:
                data.close()
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return out_path


def _tensor_bytes(gguf, data: mmap.mmap, header: _Header, tensor: tuple, deltas: dict, target) -> tuple[int, bytes]:
    """(type, bytes) of one tensor in the merged file: the base's bytes, or the merged weight."""
    name, shape, kind, offset = tensor
    base_type = gguf.GGMLQuantizationType(kind)
    block, size = gguf.GGML_QUANT_SIZES[base_type]
    n_bytes = math.prod(shape) // block * size
    start = header.data_start + offset
    raw = data[start:start + n_bytes]
    if name not in deltas:
        return kind, raw
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(shape[1], -1)  # gguf shape is (in, out)
    weight = gguf.quants.dequantize(rows, base_type).reshape(shape[1], shape[0]) + deltas[name]
    try:
        merged = gguf.quants.quantize(weight.astype(np.float32), target)
    except NotImplementedError:
        raise ValueError(f"gguf-py cannot write {target.name} tensors") from None
    return int(target), merged.tobytes()


def _write(out, data: mmap.mmap, header: _Header, blobs: list[tuple[int, bytes]]) -> None:
    """Header and metadata as in the base, new tensor infos, then the aligned tensor data."""
    out.write(data[:header.kv_end])  # magic, version, counts, metadata: unchanged
    offset = 0
    for (name, shape, _kind, _offset), (kind, blob) in zip(header.tensors, blobs):
        out.write(_gguf_string(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape))
        out.write(struct.pack("<IQ", kind, offset))
        offset += len(blob) + _pad(len(blob), header.alignment)
    out.write(b"\0" * _pad(out.tell(), header.alignment))
    for _kind, blob in blobs:
        out.write(blob + b"\0" * _pad(len(blob), header.alignment))
