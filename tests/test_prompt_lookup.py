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
    reference_forwards,
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
    # the cache holds prompt + output[:-1] before each: 3 tokens, then 3 + (1 2 3 9)[:-1]
    assert reference_forwards([1, 2, 3], [1, 2, 3, 9], PromptLookupSetting(2, 2)) == [(3, 3), (1, 6)]
    assert reference_forward_sizes([5], [], DEFAULT_SETTING) == []
    cost = lambda n, context: 0.01 * (1 + n / 10) + 0.001 * context  # noqa: E731
    assert predicted_seconds([(3, 3), (1, 6)], cost) == pytest.approx(0.013 + 0.003 + 0.011 + 0.006)


class _RecordingCache:
    """A model's cache that records (tokens, cache length before) of every forward after the prompt."""

    def __init__(self, cache, forwards):
        self._cache, self._forwards = cache, forwards

    def __getattr__(self, name):
        return getattr(self._cache, name)

    def step(self, token):
        self._forwards.append((1, self._cache.length))
        return self._cache.step(token)

    def append_span_all(self, ids):
        self._forwards.append((len(ids), self._cache.length))
        return self._cache.append_span_all(ids)


@pytest.mark.parametrize("setting", [DEFAULT_SETTING, PromptLookupSetting(1, 128), PromptLookupSetting(4, 16)])
def test_counted_contexts_equal_the_real_replays_cache_lengths(tiny_model, setting):
    """The context `reference_forwards` prices each forward at is the cache length the real replay
    runs that forward after."""
    forwards: list[tuple[int, int]] = []

    class Recording:
        def __getattr__(self, name):
            return getattr(tiny_model, name)

        def new_cache(self):
            return _RecordingCache(tiny_model.new_cache(), forwards)

    encode = tiny_model.tokenizer.encode
    prompt, target = encode("Edit:\n" + SOURCE), encode(TARGET)
    result = run_to_result(replay_prompt_lookup(Recording(), prompt, target, max_ngram_size=setting.ngram,
                                                num_pred_tokens=setting.drafts))
    assert result.output == TARGET
    assert forwards == reference_forwards(prompt, target, setting, eos_ids=tiny_model.eos_ids)
    assert forwards[0][1] == len(prompt) and forwards[-1][1] > len(prompt)


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


def test_the_ngram_index_drafts_what_the_scan_drafts():
    """NgramIndex (used by the replay count and the live drafter) against prompt_lookup_candidates,
    token by token over random and repetitive sequences, every n-gram size and a cut at EOS."""
    import random

    from backend.runtime.prompt_lookup import NgramIndex, prompt_lookup_candidates

    rng = random.Random(7)
    sequences = [[rng.randrange(6) for _ in range(300)], [rng.randrange(40) for _ in range(300)],
                 [1, 2, 3, 4] * 30 + [9] + [1, 2, 3, 4] * 5]
    for ids in sequences:
        for ngram in (1, 2, 3, 4):
            index = NgramIndex(ngram)
            for end in range(len(ids) + 1):
                for drafts, eos in ((10, ()), (3, (5,))):
                    assert index.candidates(drafts, eos) == prompt_lookup_candidates(
                        ids[:end], max_ngram_size=ngram, num_pred_tokens=drafts, eos_ids=eos), (ngram, end)
                index.extend(ids[end:end + 1])
    with pytest.raises(ValueError):
        NgramIndex(0)
