"""SequenceCache (the copy primitive, its GrowingLayer buffers, chunked prefill) and sample_token."""

from __future__ import annotations

import warnings

import pytest
import torch

from backend.runtime.kv import SequenceCache
from backend.runtime.sampling import make_generator, sample_token

CODE = '''def add(a, b):
    """Add two numbers."""
    return a + b


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5
'''


def ids_of(loaded, text):
    return loaded.tokenizer.encode(text, add_special_tokens=False)


def one_prefill(loaded, ids):
    return SequenceCache(loaded.model).append_span(ids)


# -- SequenceCache ----------------------------------------------------------------------------


@pytest.mark.parametrize("model__span__tol", [("tiny_model", 16, 1e-4), ("smol_model", 8, 1e-4)])
def test_prefill_equals_steps(request, model__span__tol):
    which, n, tol = model__span__tol
    loaded = request.getfixturevalue(which)
    ids = ids_of(loaded, CODE)[:24 + n]
    context, span = ids[:24], ids[24:]
    spanned = SequenceCache(loaded.model)
    spanned.append_span(context)
    rows = spanned.append_span_all(span)  # [N, V]
    stepped = SequenceCache(loaded.model)
    stepped.append_span(context)
    for i, token in enumerate(span):
        logits = stepped.step(token)
        assert (rows[i] - logits).abs().max().item() < tol
        assert int(rows[i].argmax()) == int(logits.argmax())
    last = SequenceCache(loaded.model)
    last.append_span(context)
    assert torch.allclose(last.append_span(span), rows[-1], atol=tol, rtol=0)
    tail = SequenceCache(loaded.model)
    tail.append_span(context)
    assert torch.allclose(tail.append_span_all(span, rows=2), rows[-2:], atol=tol, rtol=0)
    assert spanned.forwards == 2 and stepped.forwards == 1 + len(span)
    assert spanned.token_ids == stepped.token_ids == ids and spanned.length == len(ids)


def test_rollback_rerun_is_bit_identical(tiny_model):
    ids = ids_of(tiny_model, CODE)
    cache = SequenceCache(tiny_model.model)
    cache.append_span(ids[:30])
    first = cache.append_span(ids[30:50])
    stepped = cache.step(ids[50])
    cache.rollback(21)
    assert cache.length == 30 and cache.token_ids == ids[:30]
    assert cache._cache.get_seq_length() == 30  # the KV tensors shrank too
    assert torch.equal(cache.append_span(ids[30:50]), first)
    assert torch.equal(cache.step(ids[50]), stepped)
    # a different continuation after rollback sees the right positions: equals a fresh prefill
    cache.rollback(10)
    other = ids[60:70]
    assert torch.allclose(cache.append_span(other), one_prefill(tiny_model, ids[:41] + other), atol=1e-5, rtol=0)
    cache.truncate(0)
    assert cache.length == 0 and cache._cache.get_seq_length() == 0


def test_sequence_cache_rejects(tiny_model):
    cache = SequenceCache(tiny_model.model)
    with pytest.raises(ValueError):
        cache.append_span([])
    cache.append_span([1, 2, 3])
    for k in (-1, 4):
        with pytest.raises(ValueError):
            cache.rollback(k)
    cache.rollback(0)
    assert cache.length == 3 and cache.forwards == 1


def test_cache_keyword_follows_the_forward_signature(tiny_model):
    from backend.runtime.kv import _cache_keyword

    class Old:  # transformers 5.17 / 4.x: only past_key_values
        def forward(self, input_ids=None, past_key_values=None, position_ids=None):
            pass

    import transformers

    # 5.24 (pinned here) takes `cache=`; the GPU image's 5.17 only `past_key_values=` (checked in a 5.17 venv).
    known = {"5.24.0": "cache", "5.17.0": "past_key_values"}
    if transformers.__version__ in known:
        assert _cache_keyword(tiny_model.model) == known[transformers.__version__]
    assert _cache_keyword(Old()) == "past_key_values"
    # the old keyword (what 5.17 gets) drives the same cache here too
    ids = ids_of(tiny_model, CODE)[:30]
    new, old = SequenceCache(tiny_model.model), SequenceCache(tiny_model.model)
    old._keyword = "past_key_values"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # 5.24 deprecates past_key_values
        for cache in (new, old):
            cache.append_span(ids[:20])
            cache.rollback(5)
        assert torch.equal(new.step(ids[15]), old.step(ids[15]))


def plain_dynamic_cache(model):
    """A SequenceCache on transformers' own DynamicLayer (torch.cat per append): the reference."""
    from transformers import DynamicCache

    cache = SequenceCache(model)
    cache._cache = DynamicCache(config=model.config)
    return cache


@pytest.mark.parametrize("which", ["tiny_model", "smol_model"])
def test_growing_layer_equals_transformers_dynamic_layer(request, which):
    from backend.runtime.kv_layer import GrowingLayer

    loaded = request.getfixturevalue(which)
    ids = (ids_of(loaded, CODE) * 12)[:700]  # crosses the first buffer capacity (256) twice
    ours, theirs = SequenceCache(loaded.model), plain_dynamic_cache(loaded.model)
    assert all(type(layer) is GrowingLayer for layer in ours._cache.layers)
    assert not any(isinstance(layer, GrowingLayer) for layer in theirs._cache.layers)
    script = [("span", ids[:200]), ("step", ids[200]), ("span", ids[201:300]), ("back", 40),
              ("all", ids[260:270]), ("span", ids[270:600]), ("back", 333), ("step", ids[267])]
    for op, arg in script:
        if op == "back":
            ours.rollback(arg)
            theirs.rollback(arg)
            continue
        call = {"span": "append_span", "step": "step", "all": "append_span_all"}[op]
        a, b = getattr(ours, call)(arg), getattr(theirs, call)(arg)
        assert (a - b).abs().max().item() < 1e-4, (op, len(ours.token_ids))
        assert int(a.argmax(-1).sum()) == int(b.argmax(-1).sum())
    assert ours._cache.get_seq_length() == theirs._cache.get_seq_length() == ours.length == 268
    layer = ours._cache.layers[0]
    assert layer.keys.shape == theirs._cache.layers[0].keys.shape
    assert layer._key_buffer.shape[-2] >= 600  # grew, and crop kept the buffer


class SetAfter:
    """A cancel flag that becomes set after `n` checks (is_set() calls)."""

    def __init__(self, n):
        self.n, self.checks = n, 0

    def is_set(self):
        self.checks += 1
        return self.checks > self.n


def test_prefill_in_chunks_equals_one_forward(tiny_model):
    ids = ids_of(tiny_model, CODE)[:70]
    whole = SequenceCache(tiny_model.model)
    expected = whole.append_span(ids)
    chunked = SequenceCache(tiny_model.model)
    got = chunked.prefill(ids, chunk=16)
    assert torch.allclose(got, expected, atol=1e-4, rtol=0)
    assert chunked.forwards == 5 and chunked.token_ids == ids  # ceil(70 / 16) forwards
    assert torch.allclose(chunked.step(ids[0]), whole.step(ids[0]), atol=1e-4, rtol=0)
    single = SequenceCache(tiny_model.model)
    assert torch.allclose(single.prefill(ids, chunk=500), expected, atol=1e-5, rtol=0) and single.forwards == 1


def test_prefill_cancel_keeps_the_chunks_done(tiny_model):
    ids = ids_of(tiny_model, CODE)[:70]
    cache = SequenceCache(tiny_model.model)
    flag = SetAfter(2)
    assert cache.prefill(ids, chunk=16, cancel=flag) is None
    assert cache.length == 32 and cache.forwards == 2 and cache.token_ids == ids[:32]
    assert cache._cache.get_seq_length() == 32
    # the cache goes on from there as if those chunks were appended normally
    rest = cache.append_span(ids[32:])
    assert torch.allclose(rest, one_prefill(tiny_model, ids), atol=1e-4, rtol=0)
    untouched = SequenceCache(tiny_model.model)
    assert untouched.prefill(ids, chunk=16, cancel=SetAfter(0)) is None and untouched.length == 0


def test_step_seconds_times_every_one_token_forward(tiny_model):
    cache = SequenceCache(tiny_model.model)
    cache.append_span([5, 6, 7])
    cache.step(8)
    cache.append_span_all([9, 10])
    cache.append_span([11])  # one token is a decode step however it is appended
    cache.step(12)
    assert len(cache.step_seconds) == 3 and all(0 < s < 60 for s in cache.step_seconds)


def test_prefill_rejects(tiny_model):
    cache = SequenceCache(tiny_model.model)
    for ids, chunk in (([], 8), ([1, 2], 0)):
        with pytest.raises(ValueError):
            cache.prefill(ids, chunk=chunk)
    assert cache.length == 0 and cache.forwards == 0


def test_sample_token():
    logits = torch.tensor([0.0, 3.0, 2.9, -1.0])
    assert sample_token(logits, 0.0) == 1
    draws = [sample_token(logits, 1.0, 1.0, make_generator(s)) for s in range(40)]
    assert set(draws) > {1}  # really samples
    assert draws == [sample_token(logits, 1.0, 1.0, make_generator(s)) for s in range(40)]  # seeded
    gen = make_generator(3)
    assert {sample_token(logits, 1.0, 0.3, gen) for _ in range(30)} == {1}  # top-p keeps the top token
    gen = make_generator(3)
    assert {sample_token(logits, 1.0, 0.9, gen) for _ in range(60)} == {1, 2}
    for bad in ({"temperature": -1.0}, {"temperature": 1.0, "top_p": 0.0}, {"temperature": 1.0, "top_p": 1.5}):
        with pytest.raises(ValueError):
            sample_token(logits, **bad)
