"""Ceiling accounting checked by hand, the bound formula on a tiny kernel table, kernel-table validation,
and the named tokenizers the ceiling counts with."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend.measure.ceiling import (
    HISTOGRAM_BUCKETS,
    ProgramStats,
    bound,
    case_bound,
    case_ceiling,
    costs_from_kernel,
    histogram_bucket,
    program_stats,
    span_histogram,
    totals,
)
from backend.data.corpora import EditCase
from backend.data.kernel import KernelError, KernelTable
from backend.core.program import CopyLines, CopyTokens, Gen

ROOT = Path(__file__).resolve().parents[1]


def words(text: str) -> list[str]:
    """A hand-checkable tokenizer: each newline run, each space run, each word, each other character."""
    return re.findall(r"\n+|[^\S\n]+|\w+|[^\w\s]", text)


SOURCE = "a = 1\nb = 2\nc = 3\n"
TARGET = "a = 1\nb = 5\nc = 3\n"


# --- accounting -------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "tokens__bucket",
    [(0, "0"), (1, "1"), (2, "2-3"), (3, "2-3"), (4, "4-7"), (7, "4-7"), (8, "8-15"), (255, "128-255"),
     (256, "256-511"), (511, "256-511"), (512, "512+"), (10**6, "512+")],
)
def test_histogram_bucket(tokens__bucket):
    tokens, bucket = tokens__bucket
    assert histogram_bucket(tokens) == bucket


def test_span_histogram_has_every_bucket():
    histogram = span_histogram([1, 6, 6, 600])
    assert list(histogram) == list(HISTOGRAM_BUCKETS)
    assert histogram["1"] == 1 and histogram["4-7"] == 2 and histogram["512+"] == 1 and sum(histogram.values()) == 4


def test_line_program_counted_by_hand():
    ops = [CopyLines(1, 1), Gen("b = 5\n"), CopyLines(3, 3)]
    stats = program_stats(ops, SOURCE, TARGET, tokenize=words)
    # each line is 6 tokens: word, " ", "=", " ", digit, "\n"
    assert stats.gold_tokens == 18
    assert stats.copied_tokens == 12 and stats.generated_tokens == 6
    assert stats.copy_spans == (6, 6)
    # <copy lines="1-1"/>: < copy " " lines = " 1 - 1 " / > = 12 tokens; <gen> 3; </gen> 4
    assert stats.tag_tokens == 12 + 3 + 4 + 12
    assert stats.gens == 1 and stats.ops == 3
    assert stats.coverage == pytest.approx(2 / 3)


def test_oracle_programs_counted_by_hand():
    case = EditCase("hand", SOURCE, TARGET)
    result = case_ceiling(case, tokenize=words)
    assert result.stats["line", "coverage"].copied_tokens == 12  # the changed line cannot be copied
    assert result.stats["token", "coverage"].copied_tokens == 17  # everything but "5"
    assert result.stats["token", "coverage"].generated_tokens == 1
    # cost: a 12-token tag to copy 6 tokens is a loss, so the cost program is one gen of the whole target
    assert result.programs["line", "cost"] == [Gen(TARGET)]
    assert result.stats["line", "cost"].copied_tokens == 0 and result.stats["line", "cost"].tag_tokens == 7


def test_token_straddling_a_boundary_counts_for_the_earlier_segment():
    source, target = "x\n\ny\n", "x\n\nz\n"
    ops = [CopyLines(1, 1), CopyLines(2, 2), Gen("z\n")]
    stats = program_stats(ops, source, target, tokenize=words)
    # target tokens: "x", "\n\n" (starts in segment 1), "z", "\n"
    assert stats.gold_tokens == 4
    assert stats.copy_spans == (2, 0)
    assert stats.copied_tokens == 2 and stats.generated_tokens == 2
    assert span_histogram(stats.copy_spans)["0"] == 1


def test_copy_tokens_program():
    source_tokens = words(SOURCE)
    ops = [CopyTokens(1, 10), Gen("5"), CopyTokens(12, 18)]
    stats = program_stats(ops, SOURCE, TARGET, tokenize=words, source_tokens=source_tokens)
    assert (stats.copied_tokens, stats.generated_tokens, stats.copy_spans) == (17, 1, (10, 7))


def test_program_that_misses_the_target_is_rejected():
    with pytest.raises(ValueError, match="does not produce the target"):
        program_stats([CopyLines(1, 3)], SOURCE, TARGET, tokenize=words)
    with pytest.raises(ValueError, match="input has 3 lines"):
        program_stats([CopyLines(1, 4)], SOURCE, TARGET, tokenize=words)


def test_totals_sum_cases():
    a = ProgramStats(10, 6, 4, 5, (6,), 1, 2)
    b = ProgramStats(20, 20, 0, 9, (3, 17), 0, 2)
    total = totals([a, b])
    assert (total.cases, total.gold_tokens, total.copied_tokens, total.generated_tokens, total.tag_tokens) == (2, 30, 26, 4, 14)
    assert total.copy_spans == 3 and total.coverage == pytest.approx(26 / 30)
    assert total.histogram["2-3"] == 1 and total.histogram["4-7"] == 1 and total.histogram["16-31"] == 1


# --- kernel table and the bound ---------------------------------------------------------------------

TINY = {"kind": "kernel-table", "model": "tiny", "weights": "random (timing only)", "device": "cpu",
        "dtype": "float32", "context": 64, "step_seconds": 0.1,
        "rows": [{"n": 9, "prefill_seconds": 0.3}, {"n": 5, "prefill_seconds": 0.2, "speedup": 2.5}]}


def test_prefill_interpolates_through_one_step_and_extrapolates():
    kernel = KernelTable.from_dict(TINY)
    assert [r.n for r in kernel.rows] == [5, 9]
    assert kernel.points() == [(1, 0.1), (5, 0.2), (9, 0.3)]
    assert kernel.prefill_seconds(1) == pytest.approx(0.1)
    assert kernel.prefill_seconds(3) == pytest.approx(0.15)
    assert kernel.prefill_seconds(5) == pytest.approx(0.2)
    assert kernel.prefill_seconds(7) == pytest.approx(0.25)
    assert kernel.prefill_seconds(13) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        kernel.prefill_seconds(0)


def test_measured_n1_row_replaces_the_step_knot():
    kernel = KernelTable.from_dict({**TINY, "rows": [{"n": 1, "prefill_seconds": 0.12}, {"n": 5, "prefill_seconds": 0.2}]})
    assert kernel.points() == [(1, 0.12), (5, 0.2)]


def test_bound_formula_on_a_tiny_table():
    kernel = KernelTable.from_dict(TINY)
    stats = ProgramStats(gold_tokens=20, copied_tokens=16, generated_tokens=4, tag_tokens=6, copy_spans=(13, 3, 0), gens=1, ops=4)
    one = case_bound(stats, kernel)
    assert one.plain_seconds == pytest.approx(2.0)
    # (4 + 6) * 0.1 + prefill(13) + prefill(3) + prefill(max(1, 0))
    assert one.copy_seconds == pytest.approx(1.0 + 0.4 + 0.15 + 0.1)
    assert one.speedup == pytest.approx(2.0 / 1.65)
    other = ProgramStats(10, 0, 10, 7, (), 1, 1)
    pooled = bound([stats, other], kernel)
    assert pooled.plain_seconds == pytest.approx(3.0)
    assert pooled.copy_seconds == pytest.approx(1.65 + 1.7)  # ratio of sums, not mean of ratios
    assert pooled.speedup == pytest.approx(3.0 / 3.35)


def test_costs_from_kernel_fit_in_decode_steps():
    costs = costs_from_kernel(KernelTable.from_dict(TINY))
    # rows (5, 2.0 steps) and (9, 3.0 steps): slope 0.25 step/token, intercept 0.75 steps
    assert costs.copy_per_token == pytest.approx(0.25)
    assert costs.copy_fixed == pytest.approx(0.75)


@pytest.mark.parametrize(
    "change__message",
    [
        ({"kind": "other"}, "'kind' must be"),
        ({"step_seconds": 0}, "'step_seconds' must be a positive number"),
        ({"step_seconds": "fast"}, "'step_seconds' must be a positive number"),
        ({"rows": []}, "'rows' must be a non-empty list"),
        ({"rows": [{"n": 0, "prefill_seconds": 0.1}, {"n": 4, "prefill_seconds": 0.2}]}, r"rows\[0\]\.n must be an integer >= 1"),
        ({"rows": [{"n": 4}]}, r"rows\[0\]\.prefill_seconds"),
        ({"rows": [{"n": 4, "prefill_seconds": 0.1}, {"n": 4, "prefill_seconds": 0.2}]}, "repeat the same n"),
        ({"rows": [{"n": 1, "prefill_seconds": 0.1}]}, "at least one n >= 2"),
        ({"rows": [{"n": 4, "prefill_seconds": 0.1, "speedup": "x"}]}, r"rows\[0\]\.speedup must be a number"),
    ],
)
def test_malformed_kernel_table__message(tmp_path, change__message):
    change, message = change__message
    path = tmp_path / "kernel.json"
    path.write_text(json.dumps({**TINY, **change}), encoding="utf-8")
    with pytest.raises(KernelError, match=message) as error:
        KernelTable.load(path)
    assert str(path) in str(error.value)


def test_kernel_file_errors(tmp_path):
    with pytest.raises(KernelError, match="cannot read"):
        KernelTable.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{\n  nope", encoding="utf-8")
    with pytest.raises(KernelError, match="invalid JSON at line 2"):
        KernelTable.load(tmp_path / "bad.json")
    (tmp_path / "good.json").write_text(json.dumps(TINY), encoding="utf-8")
    kernel = KernelTable.load(tmp_path / "good.json")
    assert KernelTable.from_dict(kernel.to_dict()) == kernel


# --- named tokenizers (outside the core) ------------------------------------------------------------

TRICKY = 'def f(x):\r\n    return "é😀中文" <|im_end|>\n\n\tx = 12305\r'


def test_qwen_pieces_concatenate_and_count():
    from backend.tokenizers import load_tokenizer

    qwen = load_tokenizer("qwen2.5")
    pieces = qwen.pieces(TRICKY)
    assert "".join(pieces) == TRICKY
    assert "😀" in pieces  # a 4-byte character split over byte tokens comes back whole
    assert qwen.count(TRICKY) >= len(pieces)
    assert "<|im_end|>" not in pieces  # special tokens are text inside a file
    assert qwen.count('<copy lines="12-305"/>') == 11  # STACK.md: digits one per token
    assert qwen("") == []


def test_merge_byte_pieces_joins_split_characters():
    from backend.tokenizers import merge_byte_pieces

    assert merge_byte_pieces([b"\xe4\xb8", b"\xad", b"a", b"\xf0", b"\x9f\x98\x80"], "中a😀") == ["中", "a", "😀"]
    with pytest.raises(ValueError):
        merge_byte_pieces([b"a"], "b")


def test_smollm2_converted_once_then_cached(tmp_path):
    from backend.tokenizers import load_tokenizer, smollm2_cache_path

    smol = load_tokenizer("smollm2", cache_dir=tmp_path)  # converts the GGUF (~7 s)
    assert smollm2_cache_path(tmp_path).is_file()
    assert "".join(smol.pieces(TRICKY)) == TRICKY
    assert smol.count('<copy lines="12-305"/>') == 11
    code = ("from backend.tokenizers import load_tokenizer; import sys, time; t = time.time(); "
            f"s = load_tokenizer('smollm2', cache_dir={str(tmp_path)!r}); "
            "print(time.time() - t, 'transformers' in sys.modules, s.count('def f(x):'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    assert out[1] == "False"  # the cached load does not import transformers
    assert float(out[0]) < 3.0 and int(out[2]) == smol.count("def f(x):")


def test_unknown_tokenizer():
    from backend.tokenizers import TokenizerError, load_tokenizer

    with pytest.raises(TokenizerError, match="unknown tokenizer"):
        load_tokenizer("gpt9")


def test_core_modules_import_only_the_standard_library():
    code = ("import sys; import backend.data.corpora, backend.data.probe, backend.data.kernel, "
            "backend.measure.ceiling, backend.measure.perturb; "
            "print(sorted(m for m in ('torch', 'transformers', 'tiktoken', 'tokenizers', 'numpy', 'gradio', 'sqlalchemy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    assert out == "[]"
