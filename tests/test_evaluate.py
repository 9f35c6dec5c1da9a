"""The evaluation's failure taxonomy and pooling (logic only; the real model runs in test_shipped_model)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from backend.core.program import CopyLines, Gen
from backend.data.corpora import EditCase
from backend.training.evaluate import classify, compare_programs, pooled_speed, summarize

ORACLE = [CopyLines(1, 4), Gen("x = 2\n"), CopyLines(6, 9)]


@pytest.mark.parametrize("program, outcome", [
    ([CopyLines(1, 4), Gen("x = 2\n"), CopyLines(6, 9)], "wrong_structure"),  # equal programs are not a failure kind
    ([CopyLines(2, 4), Gen("x = 2\n"), CopyLines(6, 9)], "off_by_one_start"),
    ([CopyLines(1, 3), Gen("x = 2\n"), CopyLines(6, 9)], "off_by_one_end"),
    ([CopyLines(1, 4), Gen("x = 2\n"), CopyLines(7, 9)], "off_by_one_start"),
    ([CopyLines(1, 6), Gen("x = 2\n"), CopyLines(6, 9)], "wrong_range"),
    ([CopyLines(1, 4), Gen("x = 3\n"), CopyLines(6, 9)], "wrong_gen_text"),
    ([CopyLines(1, 9)], "wrong_structure"),
])
def test_compare_programs__program__outcome(program, outcome):
    assert compare_programs(program, ORACLE) == outcome


@dataclass
class FakeResult:
    output: str
    stop_reason: str
    program: str | None = None
    error: str | None = None


CASE = EditCase("c", "a\nb\n", "a\nB\n")


@pytest.mark.parametrize("result, outcome", [
    (FakeResult("a\nB\n", "eos", '<copy lines="1-1"/><gen>B\n</gen>'), "exact"),
    (FakeResult("a\n", "max_tokens", "<copy", "incomplete program"), "unfinished"),
    (FakeResult("a\n", "loop", "", "stopped: the model repeated"), "unfinished"),
    (FakeResult("", "error", "", "boom"), "invalid"),
    (FakeResult("a\nC\n", "eos", '<copy lines="1-1"/><gen>C\n</gen>'), "wrong_gen_text"),
    (FakeResult("a\nB\n", "eos", '<copy lines="1-1"/><gen>B\n</gen>', "late error"), "invalid"),
    # the output is the input: a gen that repeats the line it stands for, or copies of everything
    (FakeResult("a\nb\n", "eos", '<copy lines="1-1"/><gen>b\n</gen>'), "no_change"),
    (FakeResult("a\nb\n", "eos", '<copy lines="1-1"/><copy lines="2-2"/>'), "no_change"),
    (FakeResult("a\nb\n", "max_tokens", '<copy lines="1-2"/><gen>', "incomplete program"), "unfinished"),
])
def test_classify__result__outcome(result, outcome):
    assert classify(result, CASE, [CopyLines(1, 1), Gen("B\n")]) == outcome


def _row(kind, outcome, cad_seconds, ar_seconds=None):
    row = {"id": kind, "kind": kind, "outcome": outcome,
           "cad": {"exact": outcome == "exact", "stop_reason": "eos", "seconds": cad_seconds, "forwards": 3, "output_tokens": 10}}
    if ar_seconds is not None:
        row["ar"] = {"exact": True, "stop_reason": "eos", "seconds": ar_seconds, "forwards": 10, "output_tokens": 10}
    return row


def test_summarize__rates_per_kind_and_speed_as_ratio_of_sums():
    rows = [_row("rename", "exact", 1.0, 4.0), _row("rename", "wrong_range", 1.0, 2.0), _row("literal", "exact", 2.0)]
    summary = summarize(rows)
    assert summary["cases"] == 3 and summary["exact_match"] == pytest.approx(2 / 3)
    assert summary["per_kind"]["rename"] == {"cases": 2, "exact_match": 0.5, "finished_valid": 1.0,
                                             "written_by_aligner": 0}
    assert summary["failures"] == {"wrong_range": 1}
    speed = summary["speed"]
    assert speed["cases"] == 2 and speed["cad_vs_ar"] == pytest.approx(6.0 / 2.0)  # summed, not a median of ratios


def test_summarize__counts_the_edits_the_snippet_aligner_wrote():
    rows = [_row("snippet", "exact", 1.0), _row("snippet", "wrong_range", 1.0), _row("snippet", "exact", 1.0)]
    rows[0]["written_by"] = rows[1]["written_by"] = "snippet aligner"
    rows[2]["aligner_declined"] = "part 1 of the snippet matches more than one place"
    summary = summarize(rows)
    assert (summary["written_by_aligner"], summary["aligner_exact"], summary["aligner_declined"]) == (2, 1, 1)
    assert summary["per_kind"]["snippet"]["written_by_aligner"] == 2


def test_pooled_speed__no_common_cases():
    assert pooled_speed([_row("a", "exact", 1.0)])["totals"]["cad"]["seconds"] == 1.0


def test_line_similarity__exact_is_one_and_a_lost_file_is_zero():
    from backend.training.evaluate import line_similarity

    assert line_similarity("a\nb\n", "a\nb\n") == 1.0
    assert line_similarity("", "a\nb\n") == 0.0
    assert 0.0 < line_similarity("a\nc\n", "a\nb\n") < 1.0


def test_run_case__a_refused_request_is_a_failure_not_a_crash():
    from backend.training.evaluate import Evaluation

    class RefusingEngine:
        def text_tokenizer(self):
            return list

        def run_to_result(self, *args, **kwargs):
            raise ValueError("too long for the context")

    row = Evaluation(RefusingEngine(), strategies=("cad", "ar"), speed_limit=None, max_new_tokens=10).run_case(0, CASE)
    assert row["outcome"] == "refused" and "too long" in row["error"] and "ar" not in row
    assert summarize([row])["failures"] == {"refused": 1}


def test_evaluate_cli__an_unwritable_out_is_a_usage_error_before_the_model_loads(tmp_path, capsys):
    from backend.__main__ import main

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n", encoding="utf-8")
    corpus = tmp_path / "one.jsonl"
    corpus.write_text('{"id": "c1", "source": "a\\n", "target": "b\\n", "instruction": "Replace a with b."}\n',
                      encoding="utf-8")
    assert main(["evaluate", str(corpus), "--model", "no-such-model", "--out", str(blocker / "rows.jsonl")]) == 2
    assert "--out" in capsys.readouterr().err


def test_add_search__a_searched_row_counts_every_candidates_time():
    from types import SimpleNamespace

    from backend.runtime.decode_run import Choice
    from backend.training.evaluate import add_search

    metrics = SimpleNamespace(search_candidates=4, search_branch=2, search_seconds=10.0, prefill_seconds=1.5)
    result = SimpleNamespace(metrics=metrics, choices=(Choice(5, -0.25, 6, -1.0), Choice(7, -0.5, None, float("-inf"))))
    row = {"cad": {"seconds": 2.0}}
    add_search(row, result)
    assert row["search"] == {"candidates": 4, "branch": 2, "log_prob": -0.75}
    assert row["cad"]["seconds"] == 8.5   # all four decodes and prefills, less the prefill reported apart


def test_add_search__an_unsearched_row_is_left_alone():
    from types import SimpleNamespace

    from backend.training.evaluate import add_search

    row = {"cad": {"seconds": 2.0}}
    add_search(row, SimpleNamespace(metrics=SimpleNamespace(search_candidates=None), choices=()))
    assert row == {"cad": {"seconds": 2.0}}


def test_evaluate_cli__search_must_be_a_count(capsys):
    from backend.__main__ import main

    assert main(["evaluate", "dev.jsonl", "--search", "-1"]) == 2   # a usage error, before any model loads
    assert "--search: must be >= 0, got -1" in capsys.readouterr().err


def test_add_retry__a_second_try_counts_the_first_s_seconds_and_is_counted():
    from types import SimpleNamespace

    from backend.training.evaluate import add_retry

    note = "in lines 1-300 of 900 the model's program reached the token limit without finishing the edit, so ..."
    row = _row("single_hunk", "no_change", 2.0)
    add_retry(row, SimpleNamespace(metrics=SimpleNamespace(window_retry=note, retry_seconds=30.5)))
    assert row["window_retry"] == note and row["cad"]["seconds"] == 32.5 and row["cad"]["retry_seconds"] == 30.5
    untouched = _row("single_hunk", "exact", 2.0)
    add_retry(untouched, SimpleNamespace(metrics=SimpleNamespace(window_retry=None, retry_seconds=None)))
    assert untouched == _row("single_hunk", "exact", 2.0)
    assert summarize([row, untouched])["window_retried"] == 1
