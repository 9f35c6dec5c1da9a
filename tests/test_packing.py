"""Packed training: several edits of one window in one forward give the losses and gradients of
one forward each (tiny random Llama, float32), and the layout, grouping and order rules."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest

from backend.training.examples import IGNORE, Example
from backend.training.packing import common_prefix, gather_by_key, group_runs, pack


def _example(ids, labelled_from, key="k", case="c"):
    labels = [IGNORE] * labelled_from + list(ids[labelled_from:])
    return Example(case_id=case, kind="test", input_ids=tuple(ids), labels=tuple(labels),
                   changed=tuple(i == len(ids) - 1 for i in range(len(ids))), prefix_key=key)


def test_pack__shared_prefix_once_positions_restart_and_labels_map_to_their_branch():
    a = _example([1, 2, 3, 4, 10, 11], labelled_from=5)
    b = _example([1, 2, 3, 5, 20, 21, 22], labelled_from=5)
    packed = pack([a, b])
    assert common_prefix([a.input_ids, b.input_ids]) == 3 and packed.prefix == 3
    assert packed.input_ids == (1, 2, 3, 4, 10, 11, 5, 20, 21, 22)
    assert packed.position_ids == (0, 1, 2, 3, 4, 5, 3, 4, 5, 6)
    assert packed.branches == ((3, 6), (6, 10))
    # a: token 11 (index 5) is predicted at index 4 -> packed 4; b: 21 (5) at 4 -> 7, 22 (6) at 5 -> 8
    assert packed.predict_at == (4, 7, 8) and packed.targets == (11, 21, 22) and packed.owner == (0, 1, 1)


def test_pack__a_label_right_after_the_prefix_reads_the_prefix_logits():
    a = _example([1, 2, 3, 7], labelled_from=3)
    b = _example([1, 2, 3, 8], labelled_from=3)
    packed = pack([a, b])
    assert packed.prefix == 3 and packed.predict_at == (2, 2) and packed.targets == (7, 8)


def test_group_runs_and_gather_by_key():
    keys = ["x", "y", "x", "", "y", "x"]
    order = gather_by_key([0, 1, 2, 3, 4, 5], keys)
    assert order == [0, 2, 5, 1, 4, 3]
    batch = [_example([1, 2], 1, key=keys[i], case=str(i)) for i in order]
    runs = group_runs(batch, limit=2)
    assert [[e.case_id for e in run] for run in runs] == [["0", "2"], ["5"], ["1", "4"], ["3"]]
    assert [len(run) for run in group_runs(batch, limit=1)] == [1] * 6


@pytest.fixture(scope="module")
def tiny():
    import torch

    from backend.runtime.models import load_model
    from backend.training.trainer import TrainConfig, lora_model

    torch.manual_seed(0)
    loaded = load_model("tiny-random", threads=1)
    loaded.model.set_attn_implementation("eager")
    model = lora_model(loaded.model, TrainConfig(data="unused", out="unused", base_model="tiny-random", rank=4, alpha=8))
    for name, parameter in model.named_parameters():  # LoRA B starts at zero: give the adapter a gradient path
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.05, generator=torch.Generator().manual_seed(len(name)))
    model.train()
    return loaded, model


def _records():
    from tests.test_training_run import _records as records

    return records()


def test_packed_forward__same_losses_and_gradients_as_one_forward_each(tiny):
    import torch

    from backend.training.packed_forward import packed_token_losses
    from backend.training.trainer import encode_records

    loaded, model = tiny
    examples, _ = encode_records(loaded.tokenizer, _records(), eos_id=2, max_tokens=2048)
    assert len({e.prefix_key for e in examples}) == 1 and len(examples) == 4
    packed = pack(examples)
    assert packed.prefix > 100 and len(packed.input_ids) < sum(len(e.input_ids) for e in examples)

    def gradients():
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        model.zero_grad(set_to_none=True)
        return torch.cat([g.flatten() for g in grads])

    separate = []
    for example in examples:  # the unpacked reference: one plain causal forward per example
        positions = [i - 1 for i, label in enumerate(example.labels) if label != IGNORE and i > 0]
        out = model(input_ids=torch.tensor([example.input_ids]), logits_to_keep=torch.tensor(positions), use_cache=False)
        targets = torch.tensor([example.labels[i + 1] for i in positions])
        losses = torch.nn.functional.cross_entropy(out.logits[0].float(), targets, reduction="none")
        losses.sum().backward()
        separate.append(losses.detach())
    reference = gradients()

    together = packed_token_losses(model, packed, loaded.device, contextlib.nullcontext())
    sum(losses.sum() for losses in together).backward()
    assert [t.shape for t in together] == [s.shape for s in separate]
    for mine, theirs in zip(together, separate):
        assert torch.allclose(mine.detach(), theirs, atol=1e-4, rtol=1e-4)
    assert reference.abs().sum() > 0
    assert torch.allclose(gradients(), reference, atol=1e-5, rtol=1e-3)


def test_packed_forward__another_branch_never_leaks_in(tiny):
    """Change one branch's tokens: the other branches' losses stay exactly as they were."""
    import torch

    from backend.training.packed_forward import packed_token_losses
    from backend.training.trainer import encode_records

    loaded, model = tiny
    examples, _ = encode_records(loaded.tokenizer, _records(), eos_id=2, max_tokens=2048)
    with torch.no_grad():
        before = packed_token_losses(model, pack(examples), loaded.device, contextlib.nullcontext())
        first = examples[0]
        p = pack(examples).prefix
        scrambled = replace(first, input_ids=first.input_ids[:p] + tuple(reversed(first.input_ids[p:])))
        after = packed_token_losses(model, pack([scrambled, *examples[1:]]), loaded.device, contextlib.nullcontext())
    for mine, theirs in zip(after[1:], before[1:]):
        assert torch.equal(mine, theirs)
    assert not torch.equal(after[0], before[0])


def _packed_config(tmp_path, out: str, **settings):
    """A packed tiny-random run on `_records()`, written to tmp_path/train.jsonl."""
    from backend.training import dataset
    from backend.training.trainer import TrainConfig

    data = tmp_path / "train.jsonl"
    dataset.write_jsonl(_records(), data)
    return TrainConfig(data=str(data), out=str(tmp_path / out), base_model="tiny-random", rank=4, alpha=8,
                       lr=5e-3, warmup_steps=1, threads=1, pack=4, **settings)


def test_train_with_pack__runs_computes_fewer_tokens_and_the_loss_goes_down(tmp_path):
    from backend.training.trainer import train

    card = train(_packed_config(tmp_path, "out", max_steps=8, examples_per_step=4, checkpoint_every=4))
    assert card["examples_seen"] == 32 and card["config"]["pack"] == 4
    assert card["tokens_seen"] < 0.6 * card["example_tokens_seen"]   # the shared prompt computed once per step
    assert "packed up to 4 edits of a window per prompt" in (tmp_path / "out" / "TRAINING_CARD.md").read_text()
    curve = [point["loss"] for point in card["curve"]]
    assert sum(curve[-2:]) / 2 < sum(curve[:2]) / 2


def test_packed_run__resumes_exactly_and_records_its_packing(tmp_path):
    from backend.training.trainer import train

    config = _packed_config(tmp_path, "straight", max_steps=4, examples_per_step=3, checkpoint_every=1)
    straight = train(config)
    train(replace(config, out=str(tmp_path / "resumed"), max_minutes=0.0))
    resumed = train(replace(config, out=str(tmp_path / "resumed")), resume=True)
    assert [p["loss"] for p in resumed["curve"]] == pytest.approx([p["loss"] for p in straight["curve"]], abs=1e-4)
    assert resumed["example_tokens_seen"] == straight["example_tokens_seen"]
    with pytest.raises(ValueError, match="pack 4 -> 1"):
        train(replace(config, out=str(tmp_path / "resumed"), pack=1), resume=True)


@pytest.mark.parametrize("argv, message", [
    (["train", "--data", "DATA", "--out", "OUT", "--pack", "0"], "--pack 0"),
    (["make-data", "--out", "OUT", "--edits-per-window", "0"], "--edits-per-window 0"),
])
def test_pack_flags__out_of_range_is_a_usage_error(argv, message, tmp_path, capsys):
    from backend.__main__ import main

    data = tmp_path / "train.jsonl"
    data.write_text("{}\n")
    argv = [str(data) if a == "DATA" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
