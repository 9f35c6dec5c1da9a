"""backend.measure.replay on a scripted engine (unit tests of the logic; the real-model replay is
exercised by test_cli_edit.py and test_study.py): exact, per-case records, pooling as ratios of sums."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from backend.data.cases import EditCase
from backend.measure.replay import (
    TUNED_LOOKUP,
    boundary_summary,
    exact_counts,
    is_exact,
    pool_by_corpus,
    replay_case,
    summarize_replay,
)


@dataclass(frozen=True)
class _Metrics:
    wall_seconds: float
    forwards: int
    copies: int | None = None

    def to_dict(self) -> dict:
        out = {"wall_seconds": self.wall_seconds, "prefill_seconds": 0.5, "forwards": self.forwards,
               "jump_forward_tokens": 3, "boundary_retokenized": 1, "tokens_tag": 6}
        if self.copies is not None:
            out["copies"] = self.copies
        return out


@dataclass(frozen=True)
class _Result:
    output: str
    error: str | None
    metrics: _Metrics
    stop_reason: str = "complete"
    program: str | None = None


class _Engine:
    """Answers each (case source, strategy) with a scripted result; raises for "boom"."""

    def __init__(self, script: dict[tuple[str, str], tuple[str, str | None, float]]) -> None:
        self.script = script
        self.calls: list[tuple[str, str, str]] = []
        self.lookups: list[tuple[int, int] | None] = []

    def run_to_result(self, source: str, instruction: str, *, strategy: str, mode: str, target: str,
                      max_new_tokens: int, lookup: tuple[int, int] | None = None) -> _Result:
        assert (lookup is not None) == (strategy == "pld")  # prompt lookup always gets its setting
        name = "pld_tuned" if strategy == "pld" and lookup != (2, 10) else strategy
        self.calls.append((source, name, mode))
        self.lookups.append(lookup)
        output, error, seconds = self.script[source, name]
        if output == "boom":
            raise RuntimeError("engine failed")
        copies = 2 if strategy == "cad" else None
        return _Result(output, error, _Metrics(seconds, forwards=int(seconds * 10), copies=copies),
                       program='<copy lines="1-1"/>' if strategy == "cad" else None)


def _script(source: str, target: str, cad: float, ar: float, pld: float, tuned: float | None = None) -> dict:
    return {(source, "cad"): (target, None, cad), (source, "ar"): (target, None, ar), (source, "pld"): (target, None, pld),
            (source, "pld_tuned"): (target, None, pld if tuned is None else tuned)}


def test_exact_means_no_error_and_the_same_bytes():
    assert is_exact(_Result("a\r\n", None, _Metrics(1.0, 1)), "a\r\n")
    assert not is_exact(_Result("a\n", None, _Metrics(1.0, 1)), "a\r\n")
    assert not is_exact(_Result("a\r\n", "program stopped early", _Metrics(1.0, 1)), "a\r\n")


def test_replay_case_runs_each_strategy_in_reference_mode():
    case = EditCase("c1", "x = 1\n", "x = 2\n", instruction=None)
    engine = _Engine(_script(case.source, case.target, cad=1.0, ar=4.0, pld=2.0, tuned=1.6))
    record = replay_case(engine, case)
    assert [(s, m) for _, s, m in engine.calls] == [("cad", "reference"), ("ar", "reference"), ("pld", "reference"),
                                                   ("pld_tuned", "reference")]
    assert engine.lookups == [None, None, (2, 10), TUNED_LOOKUP]  # defaults, then the tuned setting
    assert all(record[s]["exact"] for s in ("cad", "ar", "pld", "pld_tuned"))
    assert record["cad"]["program"] == '<copy lines="1-1"/>' and "program" not in record["ar"]
    assert record["speedup"] == {"cad_vs_ar": 4.0, "pld_vs_ar": 2.0, "cad_vs_pld": 2.0, "pld_tuned_vs_ar": 2.5,
                                 "cad_vs_pld_tuned": 1.6}
    other = _Engine(_script(case.source, case.target, cad=1.0, ar=4.0, pld=2.0))
    replay_case(other, case, tuned=(4, 128))  # the caller's tuned setting (replay --lookup)
    assert other.lookups[-1] == (4, 128)
    assert record["ar"]["metrics"]["forwards"] == 40


def test_replay_case_records_a_failing_run_and_goes_on():
    case = EditCase("c2", "y\n", "z\n")
    script = _script(case.source, case.target, 1.0, 2.0, 3.0)
    script[case.source, "ar"] = ("boom", None, 0.0)
    script[case.source, "pld"] = ("y\n", "wrong", 3.0)
    record = replay_case(_Engine(script), case)
    assert record["ar"] == {"error": "RuntimeError: engine failed", "exact": False, "wall_seconds": None}
    assert record["pld"]["exact"] is False and record["cad"]["exact"] is True
    assert record["speedup"]["cad_vs_ar"] is None and record["speedup"]["cad_vs_pld"] == 3.0


def test_pooling_is_a_ratio_of_summed_seconds_per_corpus_and_pooled():
    cases = [("a", EditCase("1", "s1\n", "t1\n"), (1.0, 10.0, 2.0)), ("a", EditCase("2", "s2\n", "t2\n"), (3.0, 5.0, 2.0)),
             ("b", EditCase("3", "s3\n", "t3\n"), (2.0, 2.0, 4.0))]
    script = {}
    for _, case, (cad, ar, pld) in cases:
        script.update(_script(case.source, case.target, cad, ar, pld))
    engine = _Engine(script)
    records = [{"corpus": corpus, **replay_case(engine, case)} for corpus, case, _ in cases]
    summaries = pool_by_corpus(records, summarize_replay)
    assert list(summaries) == ["a", "b", "pooled"]
    assert summaries["a"]["speedup"]["cad_vs_ar"] == pytest.approx(15.0 / 4.0)  # not the median of 10 and 5/3
    assert summaries["pooled"]["speedup"]["cad_vs_ar"] == pytest.approx(17.0 / 6.0)
    assert summaries["pooled"]["speedup"]["cad_vs_pld"] == pytest.approx(8.0 / 6.0)
    assert summaries["pooled"]["ar"]["end_to_end_seconds"] == pytest.approx(17.0 + 3 * 0.5)
    assert summaries["pooled"]["cad_faster_than_pld_cases"] == 2
    assert exact_counts(records)["cad"] == {"ok": 3, "cases": 3}
    joins = boundary_summary(records)
    assert joins["copies"] == 6 and joins["boundary_retokenized"] == 3 and joins["rate"] == pytest.approx(0.5)
    assert joins["jump_forward_share_of_tag_tokens"] == pytest.approx(0.5)
