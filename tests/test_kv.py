"""SequenceCache (the copy primitive), TextContext (boundary-safe text) and sample_token."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest
import torch

from backend.runtime.kv import SequenceCache, TextContext
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


# -- TextContext ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pieces__merges",
    [
        (["def f():\n", "    return 1\n"], True),     # "\n" + "    " -> "\n   " + " return"
        (["a", "b"], True),                          # "ab" is one token
        (["print(1)", ")"], True),                   # "))"
        (["x = 1\n", "y = 2\n"], False),
        (["foo", "bar"], False),
    ],
)
def test_join_table(tiny_model, pieces__merges):
    pieces, merges = pieces__merges
    ctx = TextContext(tiny_model.tokenizer, SequenceCache(tiny_model.model))
    for piece in pieces:
        ctx.append_text(piece)
    assert ctx.token_ids == ids_of(tiny_model, "".join(pieces))
    assert ctx.joins == len(pieces) - 1
    assert ctx.boundary_retokenized == int(merges)
    assert ctx.forwards == len(pieces)  # one forward per append_text


def test_text_context_equals_one_canonical_prefill(tiny_model):
    # copies (append_text) interleaved with model-chosen tokens (step / append_tokens)
    tok = tiny_model.tokenizer
    segments = [
        ("text", "def add(a, b):\n"),
        ("text", '    """Add two numbers."""\n'),
        ("text", "    return a + b\n\n\n"),
        ("step", ids_of(tiny_model, "class")[0]),
        ("text", " Point:\n    def"),
        ("text", " __init__(self, x, y):\n"),
        ("tokens", ids_of(tiny_model, "        self.x = x")),
        ("text", "\n"),
        ("text", "        self.y = y\n"),
        ("text", "\n"),
        ("text", "    def norm(self):\n        return (self.x ** 2"),
        ("step", ids_of(tiny_model, " +")[0]),
        ("text", " self.y ** 2) ** 0.5\n"),
    ]
    ctx = TextContext(tok, SequenceCache(tiny_model.model), window_tokens=4)
    expected: list[int] = []
    run = ""
    for kind, value in segments:
        if kind == "text":
            logits = ctx.append_text(value)
            run += value
            continue
        expected += ids_of(tiny_model, run) if run else []
        run = ""
        expected += [value] if kind == "step" else value
        logits = ctx.step(value) if kind == "step" else ctx.append_tokens(value)
    expected += ids_of(tiny_model, run)
    assert ctx.token_ids == expected
    assert ctx.boundary_retokenized >= 2  # "\n" + "    ...", "\n\n\n"-style merges happen here
    assert (logits - one_prefill(tiny_model, expected)).abs().max().item() < 1e-4


def test_text_context_random_cuts_are_canonical(tiny_model):
    # property: any cutting of real code into append_text calls gives tokenizer(whole text)
    sources = [CODE, Path(__file__).read_text(encoding="utf-8"),
               "naïve café — 日本語 🙂 emoji\r\n\ttabs\t\tand  spaces   \n\n\n"]
    rng = random.Random(7)
    for trial in range(60):
        source = rng.choice(sources)
        start = rng.randrange(0, max(1, len(source) - 400))
        text = source[start:start + rng.randrange(20, 400)]
        cuts = sorted(set(rng.randrange(1, len(text)) for _ in range(rng.randrange(1, 10))))
        pieces = [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)])]
        ctx = TextContext(tiny_model.tokenizer, SequenceCache(tiny_model.model), window_tokens=rng.choice([1, 4, 8]))
        for piece in pieces:
            ctx.append_text(piece)
        assert ctx.token_ids == ids_of(tiny_model, text), (trial, pieces)
        assert ctx.tail_text == text


def test_text_context_on_smollm2(smol_model):
    lines = CODE.splitlines(keepends=True)
    pieces = ["".join(lines[0:3]), "".join(lines[3:6]), "".join(lines[6:9]), "".join(lines[9:])]
    prompt = ids_of(smol_model, "<|im_start|>user\nCopy this:<|im_end|>\n<|im_start|>assistant\n")
    ctx = TextContext(smol_model.tokenizer, SequenceCache(smol_model.model))
    ctx.append_tokens(prompt)
    for piece in pieces:
        logits = ctx.append_text(piece)
    expected = prompt + ids_of(smol_model, CODE)
    assert ctx.token_ids == expected
    assert ctx.boundary_retokenized >= 1
    assert (logits - one_prefill(smol_model, expected)).abs().max().item() < 1e-4


def test_text_context_rollback_freezes_the_tail(tiny_model):
    ctx = TextContext(tiny_model.tokenizer, SequenceCache(tiny_model.model))
    ctx.append_text("def f():\n")
    ctx.rollback(1)
    assert ctx.tail_text == ""
    kept = list(ctx.token_ids)
    ctx.append_text("    x")
    assert ctx.token_ids[: len(kept)] == kept
    with pytest.raises(ValueError):
        ctx.append_text("")


# -- sample_token -----------------------------------------------------------------------------


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
