"""The shipped model writes programs by itself: the trained adapter, loaded through models.yaml,
finishes valid programs on a fixed subset of the dev split (files never seen in training).

Measured for the adapter shipped on 2026-12-04 (run 11, step 189; greedy, deterministic, 400 new
tokens, the decoder that tokenises a copy followed by more program as training does): torch 14/14
programs finished and valid, 3/14 exact, mean line similarity 0.956; llama.cpp (the adapter merged
into the GGUF as Q8_0, what it loaded until 2026-12-06; F16 since) 14/14, 4/14, 0.957, on a 2-core AMD EPYC. The adapter before
it (run 3), with the decoder before that change, measured 2/14 on both (the untrained model with the few-shot prompt finishes none; an
unchanged copy of the input scores 0.956, so similarity alone says little). The exact floor sits one
case under the lower measurement, so a model that stops editing exactly fails; finished and
similarity keep margins under the measurement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBSET = ROOT / "tests" / "fixtures" / "cad-dev-subset.jsonl"
MODEL = "smollm2-135m-cad"
# Measured 2026-12-07 (shape guard, snippet aligner and copy-the-rest on, the defaults): 14/14
# finished, line similarity 0.989, 10/14 exact on both runtimes. The floors leave room for a
# different llama.cpp build or torch version moving a near tie, not for the guard or aligner failing.
FINISHED_FLOOR = 13 / 14
SIMILARITY_FLOOR = 0.95
EXACT_FLOOR = 8 / 14

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["torch", "llama.cpp"])
def evaluation(request, tmp_path_factory) -> dict:
    """The subset evaluated on each CPU runtime: torch, and llama.cpp (what `--runtime auto`, the
    default, picks on a machine without CUDA: the adapter merged into a copy of the Q4_1 base GGUF).
    The per-case rows are under the document's "rows"."""
    rows = tmp_path_factory.mktemp("evaluate") / "rows.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "backend", "evaluate", str(SUBSET), "--model", MODEL, "--max-new-tokens", "400",
         "--runtime", request.param, "--out", str(rows)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(done.stdout.strip().splitlines()[-1])
    assert document["runtime"] == request.param
    document["rows"] = [json.loads(line) for line in rows.read_text().splitlines()]
    return document


def test_subset_is_held_out_of_training():
    """Every fixture case comes from a dev-split file (split by a hash of the file name)."""
    from backend.training.dataset import DataConfig, split_of

    cases = [json.loads(line) for line in SUBSET.read_text().splitlines()]
    assert len(cases) >= 12
    assert all(split_of(case["file"], DataConfig().dev_percent) == "dev" for case in cases)


def test_evaluate_json__has_the_documented_shape(evaluation):
    corpus = evaluation["corpora"][str(SUBSET)]
    assert evaluation["model"] == MODEL
    assert corpus["cases"] == 14
    for rate in (corpus["finished_valid"], corpus["exact_match"]):
        assert 0.0 <= rate <= 1.0
    assert sum(kind["cases"] for kind in corpus["per_kind"].values()) == 14
    assert set(corpus["failures"]) <= {"unfinished", "invalid", "off_by_one_start", "off_by_one_end", "wrong_range", "no_change",
                                       "wrong_gen_text", "wrong_structure", "refused"}


def test_shipped_model__finishes_programs_and_edits_exactly(evaluation):
    corpus = evaluation["corpora"][str(SUBSET)]
    assert corpus["finished_valid"] >= FINISHED_FLOOR - 1e-9
    assert corpus["line_similarity"] >= SIMILARITY_FLOOR
    assert corpus["exact_match"] >= EXACT_FLOOR - 1e-9


def test_addressed_edits_keep_their_shape_on_the_real_model(evaluation):
    """The shape guard (backend/runtime/shape_guard.py) on by default: every case whose instruction
    fixes a shape (renames, "Delete line 7", "Add `x` after line 3", ...) gets a program in it,
    whatever the model wrote; on this subset the guard has to refuse tokens to get there."""
    from backend.core.addressed import requested_shape
    from backend.core.lines import split_lines
    from backend.core.program import parse_program

    assert evaluation["guard_shapes"] is True
    cases = {case["id"]: case for case in map(json.loads, SUBSET.read_text().splitlines())}
    shaped = [(row, requested_shape(cases[row["id"]]["instruction"], split_lines(cases[row["id"]]["source"])))
              for row in evaluation["rows"]]
    shaped = [(row, shape) for row, shape in shaped if shape is not None]
    assert len(shaped) >= 8 and sum(row["kind"] == "rename" for row, _ in shaped) == 2
    for row, shape in shaped:
        assert shape.covered(parse_program(row["program"])) == shape.end, row["id"]
    assert sum(row["shape_refused"] > 0 for row, _ in shaped) >= 2


@pytest.mark.parametrize("runtime", ["llama.cpp"])
def test_a_file_longer_than_the_context_is_edited_through_a_window(runtime):
    """The shipped model, told its context holds 2,048 tokens, asked to delete line 300 of a
    stdlib module (~4,800 tokens): it is shown a window around line 300, numbered from 1, with the
    instruction renumbered; the result is the whole file without that line (backend/core/window.py)."""
    import textwrap as module

    from backend.core.lines import split_lines
    from backend.core.program import parse_program
    from backend.core.resolve import resolve_program
    from backend.runtime.engine import EditEngine
    from backend.runtime.runtimes import load_runtime

    class SmallContext(EditEngine):
        context_length = 2048

    engine = SmallContext(load_runtime(MODEL, runtime))
    source = Path(module.__file__).read_text(encoding="utf-8")
    lines = split_lines(source)
    assert len(engine.encode(source)) > 2048 and len(lines) > 300
    result = engine.run_to_result(source, "Delete line 300.", max_new_tokens=128)
    window = engine.validate(source, "Delete line 300.", max_new_tokens=128).window
    assert window is not None and window.start <= 300 <= window.end and (window.start, window.end) != (1, len(lines))
    assert result.metrics.window == window.describe() and result.stop_reason in ("eos", "complete")
    assert result.output == "".join(lines[:299] + lines[300:])
    assert resolve_program(parse_program(result.program), source) == result.output


@pytest.mark.parametrize("runtime", ["llama.cpp"])
def test_fix_the_bug_on_a_named_line_picks_a_one_token_repair(runtime):
    """"Fix the bug on line N": the decoder holds the model's gen to line N with one token
    repaired (backend/core/repairs.py) and the model picks which. Two bugs put into `bisect.py`
    (not among the training data's sources): each output differs from the input only on line N, by
    one of the offered repairs, and the model picks the right one in at least one (measured: both,
    2026-12-07)."""
    import bisect as module

    from backend.core.addressed import requested_shape
    from backend.runtime.engine import EditEngine
    from backend.runtime.runtimes import load_runtime

    engine = EditEngine(load_runtime(MODEL, runtime))
    original = Path(module.__file__).read_text(encoding="utf-8").splitlines(keepends=True)
    exact = 0
    for old, new in (("hi = len(a)", "hi = len(x)"), ("lo = mid + 1", "lo = mid + 2")):
        number = next(i for i, line in enumerate(original, 1) if old in line)
        lines = original[:number - 1] + [original[number - 1].replace(old, new)] + original[number:]
        instruction = f"Fix the bug on line {number}."
        ((_, options),) = requested_shape(instruction, lines).texts
        result = engine.run_to_result("".join(lines), instruction, max_new_tokens=128)
        out = result.output.splitlines(keepends=True)
        assert result.stop_reason in ("eos", "complete") and len(out) == len(lines)
        assert out[:number - 1] == lines[:number - 1] and out[number:] == lines[number:]
        assert out[number - 1] in {option.text for option in options}
        exact += result.output == "".join(original)
    assert exact >= 1
