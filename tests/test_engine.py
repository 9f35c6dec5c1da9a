"""The edit engine: three strategies x two modes on one model, validation, the lock, step time."""

import threading

import pytest

from backend.data.corpora import load_corpus
from backend.core.program import parse_program
from backend.core.resolve import resolve_program
from backend.runtime.engine import EditEngine, EditError, EditLimits

SOURCE = "def area(w, h):\n    return w + h\n\n\nprint(area(2, 3))\n"
TARGET = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n"


@pytest.fixture(scope="module")
def engine(tiny_model):
    return EditEngine(tiny_model)


def events_and_result(engine, *args, **kwargs):
    events = list(engine.run(*args, **kwargs))
    assert events[-1].kind == "done" and all(e.kind != "done" for e in events[:-1])
    return events[:-1], events[-1].result


@pytest.mark.parametrize("strategy", ["cad", "ar", "pld"])
def test_reference_mode_gives_the_target_with_every_strategy(engine, strategy):
    events, result = events_and_result(engine, SOURCE, "Compute the area.", strategy=strategy, mode="reference",
                                       target=TARGET)
    assert result.output == TARGET
    assert result.strategy == strategy and result.mode == "reference"
    assert result.stop_reason == "complete" and not result.partial and result.error is None
    assert "".join(e.text for e in events if e.kind in ("copy", "gen", "draft")) == TARGET
    assert result.metrics.output_tokens == len(engine.encode(TARGET))
    if strategy == "cad":
        assert resolve_program(parse_program(result.program), SOURCE) == TARGET
        assert any(e.kind == "copy" for e in events)
    else:
        assert result.program is None


def test_reference_mode_on_real_cases(engine):
    cases = load_corpus("humanevalpack-js")[:2]
    for case in cases:
        for strategy in ("cad", "ar", "pld"):
            result = engine.run_to_result(case.source, case.instruction, strategy=strategy, mode="reference",
                                          target=case.target)
            assert result.output == case.target, (case.id, strategy)


def test_copy_as_decode_needs_fewer_forwards_than_plain_on_a_long_copy(engine):
    source = "".join(f"    total += values[{i}] * weights[{i}]\n" for i in range(20))
    target = source.replace("values[11]", "values[11] + bias")
    forwards = {}
    for strategy in ("cad", "ar", "pld"):
        result = engine.run_to_result(source, "Add the bias.", strategy=strategy, mode="reference", target=target)
        assert result.output == target
        forwards[strategy] = result.metrics.forwards
    assert forwards["cad"] * 5 < forwards["ar"]
    assert forwards["pld"] < forwards["ar"]


@pytest.mark.parametrize("strategy", ["cad", "ar", "pld"])
def test_model_mode_runs_every_strategy(engine, strategy):
    result = engine.run_to_result(SOURCE, "Compute the area.", strategy=strategy, max_new_tokens=8, temperature=1.0,
                                  seed=0)
    assert result.mode == "model" and result.strategy == strategy
    assert result.stop_reason in ("eos", "max_tokens")
    assert result.partial == (result.stop_reason == "max_tokens")


def test_empty_source_is_fine(engine):
    result = engine.run_to_result("", "Write a greeting.", strategy="cad", max_new_tokens=6, temperature=1.0, seed=2)
    assert result.stop_reason in ("eos", "max_tokens")
    result = engine.run_to_result("", None, strategy="cad", mode="reference", target="hello\n")
    assert result.output == "hello\n"


def test_cancel_keeps_a_partial_result(engine):
    cancel = threading.Event()
    events = []
    for event in engine.run(SOURCE, "x", strategy="ar", max_new_tokens=100, temperature=1.0, seed=0, cancel=cancel):
        events.append(event)
        cancel.set()
    result = events[-1].result
    assert result.stop_reason == "cancel" and result.partial


@pytest.mark.parametrize(
    "kwargs__message",
    [
        (dict(source=b"bytes"), "must be text"),
        (dict(source=None), "must be text"),
        (dict(instruction=3), "instruction must be text"),
        (dict(strategy="fast"), "unknown strategy"),
        (dict(mode="oracle"), "unknown mode"),
        (dict(mode="reference"), "needs the desired result"),
        (dict(mode="reference", target=7), "desired result must be text"),
        (dict(max_new_tokens=0), "positive integer"),
        (dict(max_new_tokens=10**6), "the limit is"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top-p"),
        (dict(source="x\n" * 6000), "lines; the limit is"),
        (dict(source="x" * 200_000), "characters; the limit is"),
    ],
)
def test_bad_requests_are_refused_at_once(engine, kwargs__message):
    kwargs, message = kwargs__message
    request = dict(source="a\n", instruction="do it")
    request.update(kwargs)
    with pytest.raises(EditError, match=message):
        engine.run(request.pop("source"), request.pop("instruction"), **request)
    assert not engine.lock.locked()


def test_too_long_for_the_context(tiny_model):
    """Refused when windows are off (in model mode an input over the context is edited through a
    window of it: tests/test_window.py)."""
    engine = EditEngine(tiny_model, limits=EditLimits(max_source_chars=10**6, max_source_lines=10**6), window_inputs=False)
    source = "".join(f"value_{i} = compute({i}, {i * 7})\n" for i in range(1200))  # ~14k tokens
    with pytest.raises(EditError, match="context holds 8,192"):
        engine.run(source, "x", strategy="ar", max_new_tokens=64)


def test_configurable_limits(tiny_model):
    engine = EditEngine(tiny_model, limits=EditLimits(max_source_chars=10, max_new_tokens=4))
    with pytest.raises(EditError, match="11 characters; the limit is 10"):
        engine.run("x" * 11, "y")
    with pytest.raises(EditError, match="max new tokens is 5; the limit is 4"):
        engine.run("x", "y", max_new_tokens=5)


def test_runs_never_overlap(engine):
    spans = {}

    def worker(name, strategy):
        first = last = None
        for event in engine.run(SOURCE, "x", strategy=strategy, mode="reference", target=TARGET):
            import time

            now = time.perf_counter()
            first = first or now
            last = now
            assert engine.lock.locked()
        spans[name] = (first, last)

    threads = [threading.Thread(target=worker, args=(s, s)) for s in ("cad", "ar", "pld")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ordered = sorted(spans.values())
    assert len(ordered) == 3
    for (_, end), (start, _) in zip(ordered, ordered[1:]):
        assert end <= start
    assert not engine.lock.locked()


def test_closing_a_run_early_releases_the_lock(engine):
    events = engine.run(SOURCE, "x", strategy="ar", mode="reference", target=TARGET)
    next(events)
    assert engine.lock.locked()
    events.close()
    assert not engine.lock.locked()


def test_step_seconds_is_measured_once(engine):
    first = engine.step_seconds()
    assert 0 < first < 5
    assert engine.step_seconds() == first


def test_engine_refuses_a_model_without_tokenizer(tiny_model):
    import dataclasses

    with pytest.raises(EditError, match="no tokenizer"):
        EditEngine(dataclasses.replace(tiny_model, tokenizer=None))


SNIPPET_SOURCE = "".join(f"def step_{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
SNIPPET = ("Apply this update:\n```python\n# ... existing code ...\ndef step_7(x):\n    return x * 7\n\n\n"
           "def step_8(x):\n# ... existing code ...\n```")


@pytest.mark.parametrize("strategy", ["cad", "ar", "pld"])
def test_model_mode_merges_an_update_snippet_with_the_aligner(engine, strategy):
    """The aligner's merge is replayed by the model with every strategy; the result says who wrote it."""
    expected = SNIPPET_SOURCE.replace("return x + 7\n", "return x * 7\n")
    events, result = events_and_result(engine, SNIPPET_SOURCE, SNIPPET, strategy=strategy, mode="model",
                                       max_new_tokens=8)
    assert result.output == expected and result.mode == "model"
    assert result.metrics.written_by == "snippet aligner" and result.metrics.aligner_declined is None
    assert "".join(e.text for e in events if e.kind in ("copy", "gen", "draft")) == expected
    if strategy == "cad":  # the long unchanged runs entered the cache as copies
        assert sum(e.tokens for e in events if e.kind == "copy") > 0.8 * len(engine.encode(expected))


def test_a_snippet_the_aligner_cannot_place_goes_to_the_model_with_the_reason(engine):
    ambiguous = "Apply this update:\n```python\n# ... existing code ...\n    return x + 1\n    # checked\n# ... existing code ...\n```"
    source = "def a(x):\n    return x + 1\n\n\ndef b(x):\n    return x + 1\n"
    result = engine.run_to_result(source, ambiguous, strategy="cad", mode="model", max_new_tokens=8)
    assert result.metrics.written_by is None
    assert "more than one place" in result.metrics.aligner_declined


def test_the_aligner_can_be_turned_off(tiny_model):
    result = EditEngine(tiny_model, align_snippets=False).run_to_result(
        SNIPPET_SOURCE, SNIPPET, strategy="cad", mode="model", max_new_tokens=8)
    assert result.metrics.written_by is None and result.metrics.aligner_declined is None
    assert result.stop_reason in ("eos", "max_tokens", "loop")


def test_model_mode_applies_a_unified_diff_too(engine):
    diff = ("Apply this diff:\n```diff\n--- a/steps.py\n+++ b/steps.py\n@@ -22,3 +22,3 @@\n def step_5(x):\n"
            "-    return x + 5\n+    return x - 5\n \n```")
    result = engine.run_to_result(SNIPPET_SOURCE, diff, strategy="cad", mode="model", max_new_tokens=8)
    assert result.output == SNIPPET_SOURCE.replace("return x + 5\n", "return x - 5\n")
    assert result.metrics.written_by == "snippet aligner"
    stale = diff.replace("return x + 5", "return x + 50")
    declined = engine.run_to_result(SNIPPET_SOURCE, stale, strategy="cad", mode="model", max_new_tokens=8)
    assert "does not match the input" in declined.metrics.aligner_declined
