"""A tiny real training run: the loss goes down, a checkpoint resumes exactly, the adapter loads.

Runs on the tiny random Llama (2 layers, SmolLM2's tokenizer) so it takes seconds; the shipped
adapter's quality is checked in test_shipped_model.py.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from backend.cli.common import UsageError
from backend.cli.train_commands import _kind_weights
from backend.runtime.prompt import context_program
from backend.training import dataset
from backend.training.examples import IGNORE, Example, changed_chars, encode_example
from backend.training.trainer import TrainConfig, epoch_order, learning_rate, train

SOURCE = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"


def _records() -> list[dict]:
    edits = [
        (SOURCE.replace("w * h", "w * h * 1.0"), "Return a float from area."),
        (SOURCE.replace("2 * (w + h)", "2 * w + 2 * h"), "Expand the perimeter formula."),
        (SOURCE.replace("def area", "def rect_area").replace("area(", "rect_area("), "Rename area to rect_area."),
        (SOURCE.replace("\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n", "\n"), "Delete perimeter."),
    ]
    records = [{"id": f"t{i}", "kind": "test", "source": SOURCE, "target": target, "instruction": text}
               for i, (target, text) in enumerate(edits)]
    dataset.add_programs(records, lambda text: list(text), context_program)
    return records


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    dataset.write_jsonl(_records(), path)
    return path


def _config(data_file, out) -> TrainConfig:
    return TrainConfig(data=str(data_file), out=str(out), base_model="tiny-random", rank=4, alpha=8, dropout=0.1,
                       lr=5e-3, warmup_steps=1, max_steps=6, examples_per_step=2, checkpoint_every=2, threads=1)


def test_encode_example__labels_cover_tags_gens_and_eos_but_not_copied_text():
    from backend.runtime.models import load_hf_tokenizer

    tokenizer = load_hf_tokenizer("smollm2-135m")
    record = _records()[0]
    example = encode_example(tokenizer, record, eos_id=2)
    labelled = tokenizer.decode([label for label in example.labels if label != IGNORE])
    # exactly the program the model writes (tags and gens), then the end of the turn
    assert labelled == record["program"] + "<|im_end|>"
    assert "<copy" in labelled and "perimeter" not in labelled
    assert len(example.input_ids) == len(example.labels)
    assert example.labels[: len(example.labels) - example.program_tokens - 30].count(IGNORE) > 0


def test_changed_chars__only_what_differs_from_the_replaced_text():
    def marked(written, replaced):
        return "".join(c for c, flag in zip(written, changed_chars(written, replaced)) if flag)

    assert marked("    return x + 1\n", "    return x - 1\n") == "+"
    assert marked("total = 2\n", "total = 10\n") == "2"
    assert marked("import os\n", "") == "import os\n"        # a pure insertion is new throughout
    assert marked("same\n", "same\n") == ""                  # a gen that repeats its line writes nothing new
    assert marked("ab\n", "abab\n") == ""                     # prefix and suffix never overlap


def test_encode_example__marks_only_the_new_text_as_changed():
    from backend.runtime.models import load_hf_tokenizer

    tokenizer = load_hf_tokenizer("smollm2-135m")
    record = _records()[0]  # "w * h" -> "w * h * 1.0" in line 2
    example = encode_example(tokenizer, record, eos_id=2)
    changed = tokenizer.decode([token for token, flag in zip(example.input_ids, example.changed) if flag])
    assert "1.0" in changed
    assert "return" not in changed and "gen" not in changed and "copy" not in changed  # kept text, tags
    assert all(label != IGNORE for label, flag in zip(example.labels, example.changed) if flag)
    assert len(example.changed) == len(example.labels)


def test_learning_rate__warms_up_then_decays_to_a_tenth():
    config = TrainConfig(data="x", out="y", lr=1e-3, warmup_steps=10, max_steps=110)
    assert learning_rate(config, 0) == pytest.approx(1e-4)
    assert learning_rate(config, 9) == pytest.approx(1e-3)
    assert learning_rate(config, 110) == pytest.approx(1e-4)
    assert learning_rate(config, 60) < learning_rate(config, 20)


def _examples_of(kinds: str) -> list[Example]:
    return [Example(case_id=str(i), kind=kind, input_ids=(1, 2), labels=(-100, 2)) for i, kind in enumerate(kinds)]


def test_epoch_order__unweighted_is_the_plain_seeded_shuffle():
    import random

    examples = _examples_of("abcabcabca")
    plain = list(range(10))
    random.Random("train:3").shuffle(plain)
    assert epoch_order(examples, (), 3) == plain
    assert epoch_order(examples, (), 4) != plain


def test_epoch_order__a_kind_appears_as_often_as_its_weight_and_weight_0_leaves_it_out():
    examples = _examples_of("aabbc")
    order = epoch_order(examples, (("a", 3), ("b", 0)), 0)
    assert sorted(order) == [0, 0, 0, 1, 1, 1, 4]
    with pytest.raises(ValueError, match="no training example of that kind"):
        epoch_order(examples, (("literal", 2),), 0)
    with pytest.raises(ValueError, match="0 or more"):
        epoch_order(examples, (("a", -1),), 0)
    with pytest.raises(ValueError, match="nothing to train on"):
        epoch_order(examples, (("a", 0), ("b", 0), ("c", 0)), 0)


def test_kind_weight_flag__parses_kind_equals_count_and_rejects_anything_else():
    assert _kind_weights(["literal=3", "rename=0"]) == (("literal", 3), ("rename", 0))
    for bad in ("literal", "literal=", "=3", "literal=-1", "literal=1.5"):
        with pytest.raises(UsageError, match="KIND=N"):
            _kind_weights([bad])


@pytest.mark.slow
def test_train__loss_goes_down_and_a_resumed_run_matches_an_uninterrupted_one(data_file, tmp_path):
    straight = train(_config(data_file, tmp_path / "straight"))
    losses = [point["loss"] for point in straight["curve"]]
    assert len(losses) == 6 and straight["finished"]
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2
    for name in ("adapter_model.safetensors", "adapter_config.json", "training.json", "TRAINING_CARD.md"):
        assert (tmp_path / "straight" / name).is_file()
    card = json.loads((tmp_path / "straight" / "training.json").read_text())
    assert card["tokens_seen"] > 0 and card["machine"]["cpu_count"] >= 1

    interrupted = train(replace(_config(data_file, tmp_path / "resumed"), max_minutes=0.0))
    assert interrupted["steps"] == 1 and not interrupted["finished"]
    with pytest.raises(ValueError, match=r"other settings \(lr 0.005 -> 0.001; prompt 'zero-shot' -> 'instruction-first'\)"):
        train(replace(_config(data_file, tmp_path / "resumed"), lr=1e-3, prompt="instruction-first"), resume=True)
    resumed = train(_config(data_file, tmp_path / "resumed"), resume=True)
    assert [p["step"] for p in resumed["curve"]] == [1, 2, 3, 4, 5, 6]
    assert [p["loss"] for p in resumed["curve"]] == pytest.approx(losses, abs=1e-4)


@pytest.mark.slow
def test_changed_weight__reweights_the_loss_and_records_the_edit_token_loss(data_file, tmp_path):
    plain = train(replace(_config(data_file, tmp_path / "plain"), max_steps=2))
    weighted = train(replace(_config(data_file, tmp_path / "weighted"), max_steps=2, changed_weight=8.0))
    # the first step's reported losses are the same model's (weights only change the gradient) ...
    assert weighted["curve"][0]["loss"] == pytest.approx(plain["curve"][0]["loss"], abs=1e-4)
    assert weighted["curve"][0]["changed_loss"] == pytest.approx(plain["curve"][0]["changed_loss"], abs=1e-4)
    # ... the second step's differ, because the first update did
    assert weighted["curve"][1]["changed_loss"] != pytest.approx(plain["curve"][1]["changed_loss"], abs=1e-6)
    assert weighted["changed_loss_last_10"] is not None
    card = (tmp_path / "weighted" / "TRAINING_CARD.md").read_text()
    assert "write the edit: 8.0" in card
    assert "Times per epoch by kind: 1 (every kind once)" in card


@pytest.mark.slow
def test_kind_weights__a_weighted_run_trains_on_the_repeated_order_and_says_so(data_file, tmp_path):
    card = train(replace(_config(data_file, tmp_path / "kinds"), max_steps=2, kind_weights=(("test", 2),)))
    assert card["steps"] == 2
    saved = json.loads((tmp_path / "kinds" / "training.json").read_text())
    assert saved["config"]["kind_weights"] == [["test", 2]]
    assert "Times per epoch by kind: test 2, others 1" in (tmp_path / "kinds" / "TRAINING_CARD.md").read_text()
    # a kind the data lacks stops the run before anything is loaded or written
    with pytest.raises(ValueError, match="--kind-weight tset: no training example of that kind"):
        train(replace(_config(data_file, tmp_path / "typo"), kind_weights=(("tset", 2),)))
    assert not (tmp_path / "typo").exists()


def test_resume_mismatches__names_changed_settings_and_other_data_but_allows_where_and_how_long(tmp_path):
    from backend.training.trainer import _comparable, resume_mismatches

    config = TrainConfig(data="a.jsonl", out="run", kind_weights=(("rename", 3),))
    state = {"config": _comparable(config), "data_sha256": "abc"}
    moved = replace(config, data="elsewhere/a.jsonl", out="run2", max_steps=900, max_minutes=5.0, threads=1,
                    checkpoint_every=3)
    assert resume_mismatches(state, moved, "abc") == []
    assert resume_mismatches(state, replace(config, kind_weights=()), "abc") == ["kind_weights [['rename', 3]] -> []"]
    assert resume_mismatches(state, config, "def") == [
        "training data a.jsonl is not the file the checkpoint trained on (sha256 differs)"]
    assert resume_mismatches({}, replace(config, seed=4), "def") == []  # a checkpoint older than the check


@pytest.mark.slow
def test_prompt_style__a_run_trains_on_its_layout_and_its_directory_loads_with_it(data_file, tmp_path):
    from backend.runtime.models import load_model, spec_for
    from backend.training.trainer import encode_records, load_records

    tokenizer = load_model("tiny-random", threads=1).tokenizer
    records = load_records(data_file)
    zero, _ = encode_records(tokenizer, records, eos_id=2, max_tokens=4096)
    first, _ = encode_records(tokenizer, records, eos_id=2, max_tokens=4096, style="instruction-first")
    for plain, ahead in zip(zero, first):  # the same answer after a prompt that is longer by the instruction
        answer = len(plain.input_ids) - next(i for i, label in enumerate(plain.labels) if label != IGNORE)
        assert len(ahead.input_ids) > len(plain.input_ids)
        assert ahead.input_ids[-answer:] == plain.input_ids[-answer:]
        assert ahead.labels[-answer:] == plain.labels[-answer:]
    run = tmp_path / "first"
    train(replace(_config(data_file, run), max_steps=1, prompt="instruction-first"))
    assert json.loads((run / "training.json").read_text())["config"]["prompt"] == "instruction-first"
    assert "(instruction-first prompt)" in (run / "TRAINING_CARD.md").read_text()
    assert spec_for(str(run)).prompt == "instruction-first"


@pytest.mark.slow
def test_merge_adapter__changes_the_model_and_leaves_no_lora_layers(data_file, tmp_path):
    import torch

    from backend.runtime.models import ModelSource, get_spec, load_model, merge_adapter

    train(replace(_config(data_file, tmp_path / "adapter"), max_steps=3))
    base = load_model("tiny-random", threads=1)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = base.model(ids).logits
    spec = replace(get_spec("tiny-random"), name="tiny-random-cad",
                   source=ModelSource(kind="adapter", base="tiny-random", path=str(tmp_path / "adapter")))
    merged = merge_adapter(base.model, spec)
    with torch.no_grad():
        after = merged(ids).logits
    assert not torch.allclose(before, after)
    assert not any("lora" in name for name, _ in merged.named_modules())


def test_merge_adapter__missing_adapter_says_how_to_make_one(tmp_path):
    from backend.runtime.models import ModelSource, ModelUnavailable, get_spec, merge_adapter

    spec = replace(get_spec("tiny-random"), source=ModelSource(kind="adapter", base="tiny-random", path=str(tmp_path)))
    with pytest.raises(ModelUnavailable, match="python -m backend train"):
        merge_adapter(None, spec)


@pytest.mark.slow
def test_init_adapter__warm_start_continues_from_the_saved_adapter(data_file, tmp_path):
    first = train(_config(data_file, tmp_path / "first"))
    warm = train(replace(_config(data_file, tmp_path / "warm"), max_steps=1, init_adapter=str(tmp_path / "first")))
    cold = first["curve"][0]["loss"]
    assert warm["curve"][0]["loss"] < cold
    with pytest.raises(ValueError, match="no adapter_model.safetensors"):
        train(replace(_config(data_file, tmp_path / "bad"), init_adapter=str(tmp_path / "missing")))


@pytest.mark.slow
def test_a_directory_train_wrote_is_a_model__base_plus_adapter_with_the_trained_prompt(data_file, tmp_path):
    """`--model var/train-run5` evaluates a run before it is registered: the same weights as an
    explicit adapter entry on the base named in training.json, and the zero-shot prompt."""
    import torch

    from backend.runtime.models import ModelSource, UnknownModel, get_spec, load_model, merge_adapter, spec_for

    run = tmp_path / "run"
    train(replace(_config(data_file, run), max_steps=2))
    spec = spec_for(str(run))
    assert (spec.source.kind, spec.source.base, spec.prompt) == ("adapter", "tiny-random", "zero-shot")
    assert spec.adapter_dir == run.resolve() and spec.vocabulary == get_spec("tiny-random").vocabulary
    explicit = replace(get_spec("tiny-random"), name="tiny-random-run",
                       source=ModelSource(kind="adapter", base="tiny-random", path=str(run)))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():  # tiny-random has random (seeded) weights, so merge onto a fresh load each time
        bare = load_model("tiny-random", threads=1).model(ids).logits
        by_path = merge_adapter(load_model("tiny-random", threads=1).model, spec)(ids).logits
        by_entry = merge_adapter(load_model("tiny-random", threads=1).model, explicit)(ids).logits
    assert torch.equal(by_path, by_entry) and not torch.allclose(by_path, bare)

    (run / "training.json").unlink()
    with pytest.raises(UnknownModel, match="training.json"):
        spec_for(str(run))


def test_sigterm__stops_after_the_step_with_a_checkpoint_and_the_adapter_then_resumes(data_file, tmp_path):
    """A run stopped to free the CPU (Ctrl-C, SIGTERM) keeps every step it made: the real CLI in a
    subprocess is signalled after its first step and exits 0 with the adapter written."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "run"
    command = [sys.executable, "-m", "backend", "train", "--data", str(data_file), "--out", str(out),
               "--model", "tiny-random", "--examples-per-step", "1", "--threads", "1", "--checkpoint-every", "1000"]
    process = subprocess.Popen([*command, "--max-steps", "100000"], cwd=root, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("step 1/"):
            process.send_signal(signal.SIGTERM)
            break
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 0, rest[-2000:]
    assert "SIGTERM: stopping after this step" in rest
    card = json.loads((out / "training.json").read_text())
    assert card["stopped_by"] == "SIGTERM" and not card["finished"] and 1 <= card["steps"] < 100000
    assert (out / "adapter_model.safetensors").is_file() and (out / "checkpoint" / "state.pt").is_file()
    assert "stopped early by SIGTERM" in (out / "TRAINING_CARD.md").read_text()

    steps = card["steps"]
    resumed = subprocess.run([*command, "--max-steps", str(steps + 1), "--resume"], cwd=root, capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resumed at step {steps}" in resumed.stderr
    card = json.loads((out / "training.json").read_text())
    assert card["finished"] and card["steps"] == steps + 1 and card["stopped_by"] is None


def test_attention_setting__eager_and_sdpa_give_the_same_losses_and_gradients(data_file):
    """`train --attention` picks a kernel for speed only: both must compute the same loss and gradient."""
    import torch

    from backend.runtime.models import load_model
    from backend.training.trainer import Run, encode_records, load_records, lora_model

    config = _config(data_file, "unused")
    results = []
    for attention in ("sdpa", "eager"):
        torch.manual_seed(0)
        loaded = load_model("tiny-random", threads=1)
        loaded.model.set_attn_implementation(attention)
        assert loaded.model.config._attn_implementation == attention
        model = lora_model(loaded.model, replace(config, attention=attention))
        for name, parameter in model.named_parameters():  # LoRA B starts at zero: give the adapter a gradient path
            if "lora_B" in name:
                torch.nn.init.normal_(parameter, std=0.02, generator=torch.Generator().manual_seed(len(name)))
        model.train()
        examples, _ = encode_records(loaded.tokenizer, load_records(config.data), eos_id=2, max_tokens=2048)
        losses = Run(replace(config, attention=attention), examples, model, loaded.device).token_losses(examples[0])
        losses.sum().backward()
        grads = [p.grad.clone() for n, p in model.named_parameters() if p.requires_grad]
        results.append((losses.detach(), grads))
    (sdpa_losses, sdpa_grads), (eager_losses, eager_grads) = results
    assert sdpa_losses.numel() > 10
    assert torch.allclose(sdpa_losses, eager_losses, atol=2e-2, rtol=1e-2)
    assert any(g.abs().sum() > 0 for g in eager_grads)
    cosine = torch.nn.functional.cosine_similarity(torch.cat([g.flatten() for g in sdpa_grads]),
                                                    torch.cat([g.flatten() for g in eager_grads]), dim=0)
    assert cosine > 0.99
