"""A peft LoRA adapter runs on llama.cpp: a random adapter made here, converted to a LoRA GGUF,
applied by llama.cpp on the Q4_1 base, moves the logits where PyTorch + peft moves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from backend.runtime.lora_gguf import _permute_rows, lora_gguf_from_peft
from backend.runtime.models import get_spec, gguf_path

TEXT = "def greet(name):\n    return 'Hello, ' + name\n\nprint(greet('world'))\n"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A random rank-8 adapter on every linear layer, saved the way training saves one, and the
    PyTorch logits of TEXT with and without it."""
    from peft import LoraConfig, get_peft_model

    from backend.runtime.kv import SequenceCache
    from backend.runtime.models import load_model

    loaded = load_model("smollm2-135m", "cpu")
    ids = list(loaded.tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    base_logits = SequenceCache(loaded.model).append_span(ids)
    torch.manual_seed(0)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False, lora_dropout=0.0)
    model = get_peft_model(loaded.model, config)
    with torch.no_grad():  # random A and B, large enough to move the logits far beyond Q4_1 noise
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param) * 0.2)
    model.eval()
    with torch.inference_mode():
        lora_logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    folder = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(str(folder))
    return {"dir": folder, "ids": ids, "base": base_logits, "lora": lora_logits}


def test_adapter_gguf__llama_cpp_applies_it_like_peft(adapter: dict, tmp_path: Path) -> None:
    from backend.runtime.llamacpp import load_llamacpp

    base_gguf = gguf_path(get_spec("smollm2-135m"))
    out = lora_gguf_from_peft(adapter["dir"], base_gguf, tmp_path / "adapter.gguf")
    assert out.is_file() and out.stat().st_size > 0
    with_lora = load_llamacpp("smollm2-135m", lora=out, n_ctx=256, threads=1)
    try:
        llama_lora = with_lora.new_cache().append_span(adapter["ids"])
    finally:
        with_lora.close()
    moved = float((adapter["lora"] - adapter["base"]).abs().max())
    off = float((llama_lora - adapter["lora"]).abs().max())
    assert moved > 2.0                 # the adapter changes the logits a lot...
    assert off < moved / 4             # ...and llama.cpp lands near PyTorch + peft, not near the base
    assert int(llama_lora.argmax()) == int(adapter["lora"].argmax())


def test_q_and_k_rows_get_llama_cpp_rotary_permutation() -> None:
    rows = torch.arange(8.0).reshape(8, 1).numpy()
    # 2 heads of 4 rows: [0 1 2 3] -> pairs (0,2),(1,3) interleaved -> [0 2 1 3]
    assert _permute_rows(rows, 2).ravel().tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.mark.parametrize(
    "config_change, message",
    [
        ({"use_dora": True}, "DoRA"),
        ({"modules_to_save": ["lm_head"]}, "whole modules"),
        ({"peft_type": "IA3"}, "only LoRA"),
    ],
)
def test_unsupported_adapters__clear_errors(adapter: dict, tmp_path: Path, config_change: dict, message: str) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    config = json.loads((adapter["dir"] / "adapter_config.json").read_text())
    config.update(config_change)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    (folder / "adapter_model.safetensors").write_bytes((adapter["dir"] / "adapter_model.safetensors").read_bytes())
    with pytest.raises(ValueError, match=message):
        lora_gguf_from_peft(folder, gguf_path(get_spec("smollm2-135m")), tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_not_an_adapter_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a peft adapter directory"):
        lora_gguf_from_peft(tmp_path, gguf_path(get_spec("smollm2-135m")), tmp_path / "x.gguf")


@pytest.mark.parametrize("qtype", ["Q8_0", "F16", "F32"])
def test_merged_gguf__llama_cpp_runs_the_merged_weights_like_peft(adapter: dict, tmp_path: Path, qtype: str) -> None:
    """The adapter merged into a copy of the base GGUF lands where PyTorch + peft lands (F32
    merged weights closer than the run-time LoRA path, which rounds activations to 8 bits)."""
    from backend.runtime.llamacpp import load_llamacpp
    from backend.runtime.merged_gguf import merged_gguf_from_peft

    base_gguf = gguf_path(get_spec("smollm2-135m"))
    out = merged_gguf_from_peft(adapter["dir"], base_gguf, tmp_path / f"merged-{qtype}.gguf", qtype)
    merged = load_llamacpp("smollm2-135m", gguf=out, n_ctx=256, threads=1)
    try:
        llama_merged = merged.new_cache().append_span(adapter["ids"])
    finally:
        merged.close()
    moved = float((adapter["lora"] - adapter["base"]).abs().max())
    off = float((llama_merged - adapter["lora"]).abs().max())
    assert moved > 2.0 and off < moved / 4
    assert int(llama_merged.argmax()) == int(adapter["lora"].argmax())


def test_merged_gguf__only_adapted_weights_change(adapter: dict, tmp_path: Path) -> None:
    import gguf

    from backend.runtime.lora_gguf import _Header
    from backend.runtime.merged_gguf import merged_gguf_from_peft

    base_gguf = gguf_path(get_spec("smollm2-135m"))
    out = merged_gguf_from_peft(adapter["dir"], base_gguf, tmp_path / "merged.gguf")
    base, merged = _Header(base_gguf), _Header(out)
    assert merged.fields == base.fields and merged.shapes == base.shapes
    assert base_gguf.read_bytes()[:base.kv_end] == out.read_bytes()[:merged.kv_end]
    types = {name: kind for name, _shape, kind, _offset in merged.tensors}
    adapted = [name for name in types if any(f".{part}." in name for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"))]
    assert len(adapted) == 7 * base.fields["llama.block_count"]
    assert all(types[name] == gguf.GGMLQuantizationType.F16 for name in adapted)  # the default type
    kept = {name: kind for name, _shape, kind, _offset in base.tensors if name not in adapted}
    assert kept and all(types[name] == kind for name, kind in kept.items())
    assert all(offset % merged.alignment == 0 for _name, _shape, _kind, offset in merged.tensors)


def test_merged_gguf__unknown_type_and_bad_adapter_refused(adapter: dict, tmp_path: Path) -> None:
    from backend.runtime.merged_gguf import merged_gguf_from_peft

    base_gguf = gguf_path(get_spec("smollm2-135m"))
    with pytest.raises(ValueError, match="unknown GGUF tensor type"):
        merged_gguf_from_peft(adapter["dir"], base_gguf, tmp_path / "x.gguf", "Q9_9")
    with pytest.raises(ValueError, match="not a peft adapter directory"):
        merged_gguf_from_peft(tmp_path, base_gguf, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_adapter_cost__llama_cpp_lora_and_merged_step_times() -> None:
    """`adapter-cost`'s llama.cpp comparison times both forms of the shipped adapter (tiny run)."""
    from backend.training.adapter_cost import llamacpp_merged_vs_lora

    costs = llamacpp_merged_vs_lora("smollm2-135m-cad", contexts=(32,), steps=2, warmup=1, rounds=1)
    assert set(costs) == {"llamacpp_lora_step_seconds_32", "llamacpp_merged_step_seconds_32", "llamacpp_merged_speedup_32"}
    assert all(value > 0 for value in costs.values())


@pytest.mark.parametrize("name__file", [
    ("smollm2-135m-cad", "smollm2-135m-cad-abc.gguf"),
    ("var/train-run5", "var_train-run5-abc.gguf"),
    ("../../etc/x", "etc_x-abc.gguf"),
    ("/abs/run", "abs_run-abc.gguf"),
    ("..", "model-abc.gguf"),
])
def test_cache_file_name__a_model_path_never_names_a_folder(name__file):
    """`--model DIR` names an adapter entry by its path: its cached GGUF stays one file in the cache dir."""
    from backend.runtime.llamacpp import cache_file_name

    name, expected = name__file
    assert cache_file_name(name, "abc", "") == expected
    assert "/" not in cache_file_name(name, "abc", "-merged-F16")
