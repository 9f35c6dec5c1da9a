"""A peft LoRA adapter as a llama.cpp LoRA GGUF, written with the `gguf` package (no llama.cpp needed).

llama.cpp applies a LoRA GGUF on top of the (quantised) base weights at load time:
W x + scale * B (A x), scale = adapter.lora.alpha / r, exactly peft's `lora_alpha / r`. So the
trained adapter runs on the embedded Q4_1 model without re-quantising anything, and the file
is small (r * (in + out) floats per adapted matrix; ~2.4 MB float32 for r=8 on q/v of SmolLM2).

The format (llama.cpp's convert_lora_to_gguf.py writes the same):
  general.architecture = the base's, general.type = "adapter", adapter.type = "lora",
  adapter.lora.alpha = alpha; per adapted matrix `blk.{i}.attn_q.weight.lora_a` (A: [r, in])
  and `.lora_b` (B: [out, r]), float32, named with gguf's tensor-name map of the architecture.
Llama-architecture GGUFs store attn_q / attn_k rows permuted for llama.cpp's rotary layout
(convert_hf_to_gguf's `permute`); transformers un-permutes them on load, so an adapter trained
on the transformers model gets the same row permutation on B for q and k here.
Rejects (ValueError): DoRA, modules_to_save, fan_in_fan_out, layers the map does not know,
an adapter whose shapes do not fit the base.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def _permute_rows(weights: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute over the rows (output dimension) of `weights`."""
    rows = weights.shape[0]
    return weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class _Header:
    """A GGUF file's metadata (scalars and strings; arrays skipped) and tensor shapes, read
    straight from its header: gguf.GGUFReader parses every vocabulary entry into numpy views,
    which takes ~67 s for SmolLM2's 49k tokens + merges on a loaded 2-core machine. Also the
    layout `merged_gguf` needs to copy the file: where the metadata ends, each tensor's (name,
    shape, type, offset) and where the tensor data starts."""

    def __init__(self, path: Path) -> None:
        import mmap
        import struct

        self._unpack = struct.unpack_from
        with open(path, "rb") as handle:
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        if self._data[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        _version, n_tensors, n_kv = self._unpack("<IQQ", self._data, 4)
        self._at = 24
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            self.fields[key] = self._value(self._take("<I")[0])
        self.kv_end = self._at  # the metadata section is bytes 24..kv_end (merged_gguf copies it)
        self.shapes: dict[str, tuple[int, ...]] = {}  # gguf order: (in, out) for a matrix
        self.tensors: list[tuple[str, tuple[int, ...], int, int]] = []  # (name, shape, type, offset)
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._take("<I")[0]
            self.shapes[name] = tuple(self._take(f"<{n_dims}Q"))
            kind, offset = self._take("<IQ")
            self.tensors.append((name, self.shapes[name], kind, offset))
        self.alignment = int(self.fields.get("general.alignment", 32))
        self.data_start = -(-self._at // self.alignment) * self.alignment  # tensor offsets count from here
        self._data.close()

    def _take(self, fmt: str) -> tuple:
        import struct

        values = self._unpack(fmt, self._data, self._at)
        self._at += struct.calcsize(fmt)
        return values

    def _string(self) -> str:
        length = self._take("<Q")[0]
        text = bytes(self._data[self._at:self._at + length]).decode("utf-8", "replace")
        self._at += length
        return text

    def _value(self, kind: int) -> Any:
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item, count = self._take("<IQ")
            for _ in range(count):
                self._value(item)
            return None
        return self._take("<" + _SCALARS[kind])[0]


def _base_facts(base_gguf: Path, header: "_Header | None" = None) -> dict[str, Any]:
    header = header if header is not None else _Header(base_gguf)
    arch = header.fields["general.architecture"]
    return {
        "arch": arch,
        "blocks": int(header.fields[f"{arch}.block_count"]),
        "heads": int(header.fields[f"{arch}.attention.head_count"]),
        "kv_heads": int(header.fields[f"{arch}.attention.head_count_kv"]),
        "shapes": header.shapes,
    }


def _read_adapter(adapter_dir: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    config_file = adapter_dir / ADAPTER_CONFIG
    if not config_file.is_file():
        raise ValueError(f"{adapter_dir} is not a peft adapter directory: no {ADAPTER_CONFIG}")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    for name in ADAPTER_WEIGHTS:
        if (adapter_dir / name).is_file():
            weights_file = adapter_dir / name
            break
    else:
        raise ValueError(f"{adapter_dir}: no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})")
    if weights_file.suffix == ".safetensors":
        from safetensors.numpy import load_file

        tensors = load_file(str(weights_file))
    else:
        import torch

        tensors = {k: v.float().numpy() for k, v in torch.load(str(weights_file), map_location="cpu").items()}
    return config, {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}


def _check_config(config: dict[str, Any]) -> None:
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"only LoRA adapters convert, not {config.get('peft_type')}")
    if config.get("use_dora"):
        raise ValueError("DoRA adapters have no llama.cpp LoRA form: merge the adapter into the weights instead")
    if config.get("modules_to_save"):
        raise ValueError(f"the adapter also trains whole modules {config['modules_to_save']}: llama.cpp LoRA cannot carry them")
    if config.get("fan_in_fan_out"):
        raise ValueError("fan_in_fan_out adapters (GPT-2 Conv1D) are not supported")


def lora_alpha(config: dict[str, Any]) -> float:
    """The alpha that gives peft's scale as llama.cpp's `alpha / r`: peft scales by alpha / r, or by
    alpha / sqrt(r) for rsLoRA adapters (so alpha * sqrt(r) there)."""
    rank = int(config["r"])
    alpha = float(config.get("lora_alpha", rank))
    return alpha * math.sqrt(rank) if config.get("use_rslora") else alpha


def _module_of(key: str) -> tuple[str, str] | None:
    """('model.layers.0.self_attn.q_proj', 'a'|'b') for a peft LoRA weight key, else None."""
    for marker, part in ((".lora_A.", "a"), (".lora_B.", "b")):
        if marker in key:
            module = key.split(marker)[0]
            for prefix in ("base_model.model.", "base_model."):
                if module.startswith(prefix):
                    module = module[len(prefix):]
                    break
            return module, part
    return None


def adapter_tensors(config: dict[str, Any], tensors: dict[str, np.ndarray], facts: dict[str, Any]) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array (A: [r, in], B: [out, r], q/k B rows permuted)."""
    import gguf

    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == facts["arch"])
    name_map = gguf.get_tensor_name_map(arch, facts["blocks"])
    out: dict[str, np.ndarray] = {}
    for key, value in tensors.items():
        found = _module_of(key)
        if found is None:
            raise ValueError(f"unexpected tensor in the adapter: {key}")
        module, part = found
        base = name_map.get_name(module)
        if base is None:
            raise ValueError(f"no GGUF tensor for adapted module {module}")
        if part == "b" and base.endswith("attn_q"):
            value = _permute_rows(value, facts["heads"])
        elif part == "b" and base.endswith("attn_k"):
            value = _permute_rows(value, facts["kv_heads"])
        n_in, n_out = facts["shapes"].get(f"{base}.weight", (None, None))
        if n_in is None:
            raise ValueError(f"the base model has no tensor {base}.weight for {module}")
        expected = n_in if part == "a" else n_out
        actual = value.shape[1] if part == "a" else value.shape[0]
        if actual != expected:
            raise ValueError(f"{module}: lora_{part.upper()} has {actual} features, the base's {base} has {expected}")
        out[f"{base}.weight.lora_{part}"] = np.ascontiguousarray(value, dtype=np.float32)
    return out


def lora_gguf_from_peft(
    adapter_dir: str | os.PathLike[str], base_gguf: str | os.PathLike[str], out_path: str | os.PathLike[str]
) -> Path:
    """Write the peft adapter in `adapter_dir` as a llama.cpp LoRA GGUF for `base_gguf`; returns out_path.

    Written to a temporary sibling and renamed into place (never a half-written file).
    """
    import gguf

    adapter_dir, base_gguf, out_path = Path(adapter_dir), Path(base_gguf), Path(out_path)
    config, tensors = _read_adapter(adapter_dir)
    _check_config(config)
    alpha = lora_alpha(config)
    facts = _base_facts(base_gguf)
    converted = adapter_tensors(config, tensors, facts)
    if not converted:
        raise ValueError(f"{adapter_dir}: the adapter holds no LoRA weights")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")  # unique: two processes may convert at once
    writer = gguf.GGUFWriter(str(tmp), facts["arch"])
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for name in sorted(converted):
        writer.add_tensor(name, converted[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out_path)
    return out_path
