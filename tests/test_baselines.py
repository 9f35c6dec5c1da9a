"""Baselines: plain decoding, prompt-lookup decoding (== greedy), forced replays, cancel, events."""

from __future__ import annotations

import random
import threading

import pytest
import torch

from backend.runtime.baselines import (
    decode_plain,
    decode_prompt_lookup,
    prompt_lookup_candidates,
    replay_plain,
    replay_prompt_lookup,
    run_to_result,
)
from backend.runtime.events import DecodeEvent, DecodeResult

SOURCE = '''def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
'''

PROMPTS = [
    "Rewrite this code, renaming the parameters a and b to x and y:\n\n" + SOURCE,
    "Add a docstring to every function. Return the whole file.\n\n" + SOURCE.replace("a, b", "left, right")
    .replace("a + b", "left + right").replace("a - b", "left - right").replace("a * b", "left * right"),
]


def chat_ids(loaded, text):
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                               tokenize=True)
    return list(ids["input_ids"] if not isinstance(ids, list) else ids)


def check_stream(events: list[DecodeEvent]) -> DecodeResult:
    """The event contract: gen (and accepted-draft) events then exactly one done; cumulative
    counters never go back; draft events carry exactly the accepted draft tokens."""
    assert all(e.kind in ("gen", "draft") for e in events[:-1]) and events[-1].kind == "done"
    assert all(e.result is None for e in events[:-1])
    result = events[-1].result
    assert "".join(e.text for e in events) == result.output
    assert sum(e.tokens for e in events) == result.metrics.output_tokens == result.metrics.tokens_generated
    forwards = [e.forwards for e in events]
    elapsed = [e.elapsed for e in events]
    assert forwards == sorted(forwards) and elapsed == sorted(elapsed)
    assert forwards[-1] == result.metrics.forwards
    assert result.program is None and result.error is None
    assert sum(e.tokens for e in events if e.kind == "draft") == (result.metrics.accepted_draft_tokens or 0)
    return result


# -- prompt-lookup drafts match transformers' -------------------------------------------------


def transformers_candidates(ids, max_ngram, num_pred, eos):
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    generator = PromptLookupCandidateGenerator(
        eos_token_id=torch.tensor(eos) if eos else None, num_output_tokens=num_pred,
        max_matching_ngram_size=max_ngram, max_length=10_000,
    )
    out, _ = generator.get_candidates(torch.tensor([ids]))
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize(
    "ids__expected",
    [
        ([1, 2, 3, 4, 1, 2], [3, 4, 1, 2]),          # bigram match, continuation runs to the end
        ([5, 1, 2, 9, 8, 7, 1, 2], [9, 8, 7, 1, 2]),
        ([1, 2, 3, 1, 2, 4, 1, 2], [3, 1, 2, 4, 1, 2]),  # the first (leftmost) match wins
        ([7, 8, 9, 6, 9], [6, 9]),                   # no bigram match: unigram
        ([1, 2, 3], []),
        ([4], []),
    ],
)
def test_prompt_lookup_table(ids__expected):
    ids, expected = ids__expected
    assert prompt_lookup_candidates(ids) == expected == transformers_candidates(ids, 2, 10, [])


def test_prompt_lookup_matches_transformers_on_random_sequences():
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randrange(6) for _ in range(rng.randrange(1, 40))]
        ngram, num = rng.choice([1, 2, 3]), rng.choice([1, 3, 10])
        eos = rng.choice([[], [0], [0, 5]])
        ours = prompt_lookup_candidates(ids, max_ngram_size=ngram, num_pred_tokens=num, eos_ids=eos)
        assert ours == transformers_candidates(ids, ngram, num, eos), (ids, ngram, num, eos)


# -- on the real SmolLM2: prompt lookup == greedy -----------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS, ids=["rename", "docstrings"])
def test_prompt_lookup_equals_greedy_on_smollm2(smol_model, prompt):
    prompt_ids = chat_ids(smol_model, prompt)
    plain_events = list(decode_plain(smol_model, prompt_ids, max_new_tokens=40))
    pld_events = list(decode_prompt_lookup(smol_model, prompt_ids, max_new_tokens=40))
    plain, pld = check_stream(plain_events), check_stream(pld_events)
    assert pld.output == plain.output
    assert pld.metrics.output_tokens == plain.metrics.output_tokens
    assert plain.strategy == "ar" and pld.strategy == "pld" and plain.mode == pld.mode == "model"
    assert plain.metrics.forwards == plain.metrics.output_tokens - (plain.stop_reason == "max_tokens")
    assert pld.metrics.accepted_draft_tokens > 5  # the output repeats the prompt
    assert pld.metrics.forwards < plain.metrics.forwards
    assert pld.metrics.forwards + pld.metrics.accepted_draft_tokens == plain.metrics.forwards


# -- reference replays ----------------------------------------------------------------------------


def test_replays_reproduce_the_target(tiny_model):
    tok = tiny_model.tokenizer
    prompt_ids = chat_ids(tiny_model, "Rename a to x:\n\n" + SOURCE)
    target = SOURCE.replace("a, b", "x, b").replace("a +", "x +").replace("a -", "x -").replace("a *", "x *") + "é🙂\n"
    target_ids = tok.encode(target, add_special_tokens=False)
    plain = check_stream(list(replay_plain(tiny_model, prompt_ids, target_ids)))
    pld = check_stream(list(replay_prompt_lookup(tiny_model, prompt_ids, target_ids)))
    for result in (plain, pld):
        assert result.output == target and result.mode == "reference"
        assert result.stop_reason == "complete" and not result.partial
        assert result.metrics.output_tokens == len(target_ids)
    # a forward per target token, including the one after the last (where EOS would be read)
    assert plain.metrics.forwards == len(target_ids)
    assert pld.metrics.forwards + pld.metrics.accepted_draft_tokens == len(target_ids)
    assert pld.metrics.forwards < len(target_ids) // 2
    # prompt lookup's accepted drafts are shown apart from the model's own tokens; plain has none
    assert not [e for e in replay_plain(tiny_model, prompt_ids, target_ids) if e.kind == "draft"]
    drafts = [e for e in replay_prompt_lookup(tiny_model, prompt_ids, target_ids) if e.kind == "draft"]
    assert drafts and all(e.text in target for e in drafts)
    assert sum(e.tokens for e in drafts) == pld.metrics.accepted_draft_tokens > 0


def test_replay_on_smollm2(smol_model):
    prompt_ids = chat_ids(smol_model, PROMPTS[0])
    target_ids = smol_model.tokenizer.encode(SOURCE, add_special_tokens=False)
    result = check_stream(list(replay_prompt_lookup(smol_model, prompt_ids, target_ids)))
    assert result.output == SOURCE and result.stop_reason == "complete"


def test_empty_target_replay(tiny_model):
    result = run_to_result(replay_plain(tiny_model, [1, 2, 3], []))
    assert result.output == "" and result.stop_reason == "complete" and result.metrics.forwards == 0


# -- stopping: cancel, max tokens, EOS; sampling -----------------------------------------------------


@pytest.mark.parametrize("strategy", [decode_plain, decode_prompt_lookup])
def test_cancel_stops_early_with_partial_output(tiny_model, strategy):
    cancel = threading.Event()
    events = []
    for event in strategy(tiny_model, chat_ids(tiny_model, SOURCE), max_new_tokens=50, cancel=cancel, eos_ids=()):
        events.append(event)
        if len(events) == 3:
            cancel.set()
    result = check_stream(events)
    assert result.partial and result.stop_reason == "cancel"
    assert 3 <= result.metrics.output_tokens < 50


def test_cancel_replay(tiny_model):
    cancel = threading.Event()
    cancel.set()
    result = run_to_result(replay_plain(tiny_model, [1, 2, 3], [5, 6, 7, 8], cancel=cancel))
    # a cancel already set stops during the (chunked, cancellable) prompt prefill: nothing decoded
    assert result.partial and result.stop_reason == "cancel" and result.metrics.output_tokens == 0
    assert result.output == "" and result.metrics.forwards == 0


def test_max_tokens_and_eos(tiny_model):
    prompt_ids = chat_ids(tiny_model, SOURCE)
    for strategy in (decode_plain, decode_prompt_lookup):
        result = check_stream(list(strategy(tiny_model, prompt_ids, max_new_tokens=7, eos_ids=())))
        assert result.partial and result.stop_reason == "max_tokens" and result.metrics.output_tokens == 7
    first = run_to_result(decode_plain(tiny_model, prompt_ids, max_new_tokens=1, eos_ids=()))
    first_id = tiny_model.tokenizer.encode(first.output, add_special_tokens=False)[0]
    stopped = run_to_result(decode_plain(tiny_model, prompt_ids, max_new_tokens=5, eos_ids=[first_id]))
    assert stopped.stop_reason == "eos" and not stopped.partial and stopped.output == ""
    with pytest.raises(ValueError):
        run_to_result(decode_plain(tiny_model, [], max_new_tokens=5))
    with pytest.raises(ValueError):
        run_to_result(decode_plain(tiny_model, prompt_ids, max_new_tokens=0))


def test_seeded_sampling_is_reproducible(tiny_model):
    prompt_ids = chat_ids(tiny_model, SOURCE)
    for strategy in (decode_plain, decode_prompt_lookup):
        runs = [run_to_result(strategy(tiny_model, prompt_ids, max_new_tokens=12, temperature=1.0, top_p=0.9, seed=s,
                                       eos_ids=())) for s in (1, 1, 2)]
        assert runs[0].output == runs[1].output
        assert runs[0].metrics.output_tokens == 12
    greedy = run_to_result(decode_plain(tiny_model, prompt_ids, max_new_tokens=12, eos_ids=()))
    assert greedy.output == run_to_result(decode_prompt_lookup(tiny_model, prompt_ids, max_new_tokens=12,
                                                               eos_ids=())).output
