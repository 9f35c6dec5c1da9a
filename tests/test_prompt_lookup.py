"""Prompt lookup's settings, its model-free replay count, the dev split and the choice of setting."""

from __future__ import annotations

import pytest

from backend.runtime.baselines import replay_prompt_lookup, run_to_result
from backend.runtime.prompt_lookup import (
    DEFAULT_SETTING,
    SWEEP,
    PromptLookupSetting,
    dev_split,
    fastest,
    parse_setting,
    predicted_seconds,
    reference_forward_sizes,
)


@pytest.mark.parametrize("text__setting", [
    ("3-gram/64", PromptLookupSetting(3, 64)), ("2/10", PromptLookupSetting(2, 10)),
    (" 1-gram/128 ", PromptLookupSetting(1, 128)), ("0/10", None), ("3-gram", None), ("a/b", None), ("2/-1", None),
])
def test_parse_setting(text__setting):
    text, setting = text__setting
    if setting is None:
        with pytest.raises(ValueError, match="N-gram/K"):
            parse_setting(text)
    else:
        assert parse_setting(text) == setting and parse_setting(setting.label) == setting


def test_sweep_covers_the_grid_and_the_default():
    assert len(SWEEP) == len(set(SWEEP)) == 20 and DEFAULT_SETTING in SWEEP
    assert {s.ngram for s in SWEEP} == {1, 2, 3, 4} and {s.drafts for s in SWEEP} == {10, 16, 32, 64, 128}


SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TARGET = SOURCE.replace("a - b", "b - a").replace("def mul", "def times") + "\n\ndef div(a, b):\n    return a / b\n"


@pytest.mark.parametrize("setting", [DEFAULT_SETTING, PromptLookupSetting(1, 128), PromptLookupSetting(4, 16)])
def test_counted_forwards_equal_the_real_replay(tiny_model, setting):
    encode = tiny_model.tokenizer.encode
    prompt, target = encode("Edit:\n" + SOURCE), encode(TARGET)
    result = run_to_result(replay_prompt_lookup(tiny_model, prompt, target, max_ngram_size=setting.ngram,
                                                num_pred_tokens=setting.drafts))
    sizes = reference_forward_sizes(prompt, target, setting, eos_ids=tiny_model.eos_ids)
    assert result.metrics.forwards == len(sizes) and result.metrics.draft_tokens == sum(sizes) - len(sizes)
    assert result.output == TARGET
    assert len(sizes) < len(target)  # the copied lines were drafted


def test_forward_sizes_by_hand():
    # prompt 1 2 3 | target 1 2 3 9: after "1" the 2-gram finds nothing, the 1-gram "1" drafts 2 3 (+ 1 2 3 ...)
    sizes = reference_forward_sizes([1, 2, 3], [1, 2, 3, 9], PromptLookupSetting(2, 2))
    # forward 1: pending 1 + drafts [2, 3] -> both hit, bonus 9; forward 2: pending 9, nothing drafted -> end
    assert sizes == [3, 1]
    assert reference_forward_sizes([5], [], DEFAULT_SETTING) == []
    assert predicted_seconds([3, 1], lambda n: 0.01 * (1 + n / 10)) == pytest.approx(0.013 + 0.011)


def test_dev_split_is_deterministic_disjoint_and_covering():
    ids = [f"case-{i}" for i in range(10)]
    dev, rest = dev_split(ids)
    assert dev_split(list(reversed(ids))) == (list(reversed(dev)), list(reversed(rest)))
    assert sorted(dev + rest) == sorted(ids) and not set(dev) & set(rest) and len(dev) == 3
    assert [d for d in ids if d in dev] == dev  # input order kept
    assert dev_split(["only"]) == (["only"], [])
    one, two = dev_split(["a", "b"])
    assert len(one) == 1 and len(two) == 1
    with pytest.raises(ValueError):
        dev_split(ids, dev_fraction=1.0)


def test_fastest():
    a, b, c = PromptLookupSetting(2, 10), PromptLookupSetting(3, 64), PromptLookupSetting(1, 16)
    assert fastest({a: 2.0, b: 1.5, c: 1.7}) == b
    assert fastest({a: 1.0, c: 1.0}) == c  # tie: smaller n-gram
    with pytest.raises(ValueError):
        fastest({})
