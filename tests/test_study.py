"""The study command: `study --quick` end to end (real model, tiny subsets), and its pure parts on tables.

The quick run is what CI exercises: every section of results.json holds numbers, the figures and
report.md exist, and the numbers agree with each other (round trips == cases, speed-ups == ratios of
summed seconds, copied + generated == gold). Unit tests cover the summaries, kernel-table merging and
the report on small hand-made documents, without a model.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli.study_command import config_from_args
from backend.study.report import render_report
from backend.measure.replay import STRATEGIES, summarize_replay
from backend.study.config import StudyConfig, StudyError
from backend.study.stages.kernel import read_kernel_tables

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("kernel", "ceiling", "roundtrip", "bound", "perturbation", "replay", "losslessness", "boundary",
            "model_mode", "machine", "stages", "corpora")
KERNEL = {"kind": "kernel-table", "model": "qwen2.5-7b-shape", "weights": "random (timing only)", "device": "cuda",
          "dtype": "bfloat16", "context": 512, "step_seconds": 0.02,
          "rows": [{"n": 8, "prefill_seconds": 0.021, "steps_seconds": 0.16, "speedup": 7.62},
                   {"n": 512, "prefill_seconds": 0.03, "steps_seconds": 10.24, "speedup": 341.3}]}


def _study(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "study", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=1800)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --- the quick run ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("study") / "out"
    done = _study("--quick", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return out, results, done.stdout


@pytest.mark.slow
def test_quick__writes_results_report_figures(quick: tuple[Path, dict, str]) -> None:
    out, results, stdout = quick
    assert (out / "report.md").is_file()
    for name in ("kernel_speedup", "span_histograms", "coverage", "bound_vs_measured", "perturbation"):
        assert (out / "figures" / f"{name}.html").is_file(), name
        if results["figures"]["png"]:
            assert (out / "figures" / f"{name}.png").stat().st_size > 1000, name
    last = json.loads(stdout.strip().splitlines()[-1])
    assert last["command"] == "study" and last["quick"] is True


@pytest.mark.slow
def test_quick__every_section_has_numbers(quick: tuple[Path, dict, str]) -> None:
    _, results, _ = quick
    for section in SECTIONS:
        assert results.get(section), section
    assert _is_number(results["duration_seconds"]) and results["duration_seconds"] > 0
    for stage in ("kernel", "ceiling", "bound", "perturbation", "replay", "model_mode", "figures"):
        assert _is_number(results["stages"][stage]["seconds"]), stage
    machine = results["machine"]
    assert machine["cpu"] and machine["usable_cpus"] >= 1 and machine["versions"]["torch"]
    assert results["model"]["dtype"] and results["model"]["device"]
    table = results["kernel"]["tables"][0]
    assert [r["n"] for r in table["rows"]] == [8, 32]
    assert all(_is_number(r["speedup"]) and r["speedup"] > 0 for r in table["rows"])
    for tokenizer, data in results["ceiling"]["tokenizers"].items():
        for name, corpus in data["corpora"].items():
            for granularity in ("line", "token"):
                c = corpus[granularity]
                assert c["copied_tokens"] + c["generated_tokens"] == c["gold_tokens"], (tokenizer, name)
                assert 0.0 <= c["coverage"] <= 1.0
    for entry in results["bound"]["tables"]:
        assert _is_number(entry["pooled"]["line"]["speedup"]) and entry["pooled"]["line"]["speedup"] > 0
    replay = results["replay"]["pooled"]
    assert replay["timed_cases"] >= 3
    assert all(_is_number(v) and v > 0 for v in replay["speedup"].values())
    assert _is_number(replay["vs_bound"]["fraction_of_bound"])
    mm = results["model_mode"]
    assert mm["sample"] == 2 and 0 <= mm["exact"] <= mm["valid"] <= mm["sample"]


@pytest.mark.slow
def test_quick__numbers_agree(quick: tuple[Path, dict, str]) -> None:
    _, results, _ = quick
    ceiling_limit = results["config"]["ceiling_limit"]
    for data in results["roundtrip"]["tokenizers"].values():
        for name, counts in data["corpora"].items():
            assert counts["cases"] == min(ceiling_limit, results["corpora"][name]["cases"])
            assert counts["line"] == {"ok": counts["cases"], "cases": counts["cases"]}
            assert counts["token"] == {"ok": counts["cases"], "cases": counts["cases"]}
            assert counts["failures"] == []
    through_model = results["losslessness"]["model"]["corpora"]
    replayed = results["replay"]["cases"]
    assert through_model["pooled"]["cad"]["cases"] == len(replayed)
    for strategy in STRATEGIES:
        assert through_model["pooled"][strategy]["ok"] == len(replayed), strategy
    pooled = results["replay"]["pooled"]
    seconds = {s: sum(c[s]["wall_seconds"] for c in replayed) for s in STRATEGIES}
    assert pooled["speedup"]["cad_vs_ar"] == pytest.approx(seconds["ar"] / seconds["cad"], rel=1e-4)
    assert pooled["speedup"]["pld_vs_ar"] == pytest.approx(seconds["ar"] / seconds["pld"], rel=1e-4)
    for series in [results["perturbation"]["pooled"], *results["perturbation"]["corpora"].values()]:
        assert series[0]["rate"] == 0.0 and series[0]["exact_rate"] == 1.0
    boundary = results["boundary"]["corpora"]["pooled"]
    assert boundary["cases"] == len(replayed) and boundary["copies"] >= 1
    assert sum(results["boundary"]["corpora"][n]["copies"] for n in results["corpora"]) == boundary["copies"]


@pytest.mark.slow
def test_quick__report_has_the_comparison_table(quick: tuple[Path, dict, str]) -> None:
    out, results, _ = quick
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Published figures vs ours" in report
    assert "| figure | published (NVIDIA A100, bf16" in report
    for published in ("6.8x-303x", "74-98%", "91-99%", "3.4x-29x (13x pooled)", "all 482 cases", "100% -> 15.5%"):
        assert published in report, published
    assert "beats prompt-lookup decoding" in report
    assert f"{results['kernel']['tables'][0]['label']}" in report
    assert "Quick run" in report


@pytest.mark.slow
def test_quick__the_replay_again_on_llama_cpp_beside_torch(quick: tuple[Path, dict, str]) -> None:
    """Issue 11: the study reports both CPU runtimes side by side, on the same cases, in one run."""
    out, results, _ = quick
    section = results["runtimes"]
    assert set(section["runtimes"]) == {"torch", "llama.cpp"} and not section["skipped"]
    replayed = [(c["corpus"], c["id"]) for c in results["replay"]["cases"]]
    for runtime in section["runtimes"].values():
        assert runtime["step_seconds"] > 0
        assert [(c["corpus"], c["id"]) for c in runtime["cases"]] == replayed
    assert section["corpora"], "some corpus replayed exactly on both runtimes"
    for entry in section["corpora"].values():
        plain = entry["seconds"][entry["fastest_plain"]]["ar"]
        assert plain == min(row["ar"] for row in entry["seconds"].values())
        assert entry["vs_fastest_plain"][f"{entry['fastest_plain']}/ar"] == pytest.approx(1.0)
    assert "### The same replay on each CPU runtime" in (out / "report.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_quick__prompt_lookup_tuned_on_a_dev_split_disjoint_from_the_timed_cases(quick: tuple[Path, dict, str]) -> None:
    """Issue 10: the peer's setting is chosen per corpus on cases the replay never times."""
    from backend.runtime.prompt_lookup import SWEEP

    replay = quick[1]["replay"]
    sweep = {(s.ngram, s.drafts) for s in SWEEP}
    for corpus, tuned in replay["tuned_by_corpus"].items():
        timed = {c["id"] for c in replay["cases"] if c["corpus"] == corpus}
        assert tuned["dev_cases"] and not timed & set(tuned["dev_cases"]), corpus
        assert tuple(tuned["setting"]) in sweep and tuned["predicted_seconds"] > 0


def test_compare_runtimes__same_cases_on_every_runtime_against_the_fastest_plain() -> None:
    from backend.study.stages.runtimes import compare_runtimes

    def case(corpus, id_, seconds, exact=True):
        return {"corpus": corpus, "id": id_, **{s: {"exact": exact, "wall_seconds": seconds[s]} for s in STRATEGIES}}

    fast = {"cad": 1.0, "ar": 4.0, "pld": 3.0, "pld_tuned": 2.0}
    slow = {s: 5 * v for s, v in fast.items()}
    runtimes = {"torch": {"cases": [case("c", "1", slow), case("c", "2", slow)]},
                "llama.cpp": {"cases": [case("c", "1", fast), case("c", "2", fast, exact=False)]}}
    result = compare_runtimes(runtimes, ["c", "empty"])
    assert set(result) == {"c"} and result["c"]["cases"] == 1  # case 2 failed on llama.cpp: left out everywhere
    assert result["c"]["fastest_plain"] == "llama.cpp"
    assert result["c"]["vs_fastest_plain"]["llama.cpp/cad"] == pytest.approx(4.0)
    assert result["c"]["vs_fastest_plain"]["torch/ar"] == pytest.approx(0.2)


@pytest.mark.slow
def test_quick__merge_extra_kernel_from_results(quick: tuple[Path, dict, str], tmp_path: Path) -> None:
    out, results, _ = quick
    extra = tmp_path / "gpu.json"
    extra.write_text(json.dumps(KERNEL), encoding="utf-8")
    merged_out = tmp_path / "merged"
    done = _study("--from-results", str(out / "results.json"), "--extra-kernel", str(extra), "--out",
                  str(merged_out), "--no-png", "--report-dir", str(tmp_path / "docs"))
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads((merged_out / "results.json").read_text(encoding="utf-8"))
    assert len(merged["kernel"]["tables"]) == len(results["kernel"]["tables"]) + 1
    assert len(merged["bound"]["tables"]) == len(results["bound"]["tables"]) + 1
    new = merged["bound"]["tables"][-1]
    assert new["tokenizer"] == "qwen2.5" and new["device"] == "cuda"
    assert (tmp_path / "docs" / "results.md").is_file()
    assert "qwen2.5-7b-shape cuda bfloat16" in (tmp_path / "docs" / "results.md").read_text(encoding="utf-8")


# --- pure parts ------------------------------------------------------------------------------------


def _case(corpus: str, gold: int, cad: float, ar: float, pld: float, tuned: float | None = None) -> dict:
    def run(seconds: float) -> dict:
        return {"wall_seconds": seconds, "prefill_seconds": 0.5, "forwards": 10, "exact": True,
                "metrics": {"jump_forward_tokens": 2, "boundary_retokenized": 1, "prompt_tokens": 100}}

    return {"corpus": corpus, "id": f"{corpus}/{gold}", "gold_tokens": gold, "cad": run(cad), "ar": run(ar),
            "pld": run(pld), "pld_tuned": run(pld if tuned is None else tuned), "bound": {"plain_seconds": gold * 0.1, "copy_seconds": 1.0, "copy_spans": [gold - 4],
                                       "generated_tokens": 4, "tag_tokens": 8}}


class _Kernel:
    step_seconds = 0.1
    context = 512

    def prefill_seconds(self, n: int) -> float:
        return 0.1 + 0.01 * n


def test_summarize_replay__speedups_are_ratios_of_sums() -> None:
    cases = [_case("a", 100, cad=1.0, ar=10.0, pld=2.0, tuned=1.5), _case("a", 50, cad=3.0, ar=5.0, pld=2.0, tuned=1.5)]
    summary = summarize_replay(cases, _Kernel())
    assert summary["speedup"]["cad_vs_pld_tuned"] == pytest.approx(3.0 / 4.0)  # the tuned peer wins here
    assert summary["speedup"]["pld_tuned_vs_ar"] == pytest.approx(15.0 / 3.0)
    assert summary["cad_faster_than_pld_tuned_cases"] == 1
    assert summary["speedup"]["cad_vs_ar"] == pytest.approx(15.0 / 4.0)
    assert summary["speedup"]["pld_vs_ar"] == pytest.approx(15.0 / 4.0)
    assert summary["speedup"]["cad_vs_pld"] == pytest.approx(1.0)
    assert summary["cad_faster_than_pld_cases"] == 1
    bound = summary["vs_bound"]
    assert bound["bound_speedup"] == pytest.approx(15.0 / 2.0)
    assert bound["fraction_of_bound"] == pytest.approx((15.0 / 4.0) / (15.0 / 2.0))
    assert bound["jump_forward_tokens"] == 4 and bound["boundary_retokenized"] == 2


def test_summarize_replay__failed_case_is_not_timed() -> None:
    failed = _case("a", 10, 1.0, 2.0, 3.0)
    failed["ar"] = {"error": "EditError: too long", "exact": False, "wall_seconds": None}
    summary = summarize_replay([failed], _Kernel())
    assert summary == {"cases": 1, "timed_cases": 0}


def test_read_kernel_tables__table_results_and_stdout(tmp_path: Path) -> None:
    plain = tmp_path / "table.json"
    plain.write_text(json.dumps(KERNEL), encoding="utf-8")
    stdout = tmp_path / "bench.txt"
    stdout.write_text("n  prefill\n8  21 ms\n" + json.dumps(KERNEL) + "\n", encoding="utf-8")
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"kind": "study-results", "machine": {"accelerator": "H200"},
                                   "kernel": {"tables": [{**KERNEL, "origin": "measured in this run"},
                                                         {**KERNEL, "origin": "merged from x"}]}}), encoding="utf-8")
    assert read_kernel_tables(str(plain))[0]["rows"] == KERNEL["rows"]
    assert read_kernel_tables(str(stdout))[0]["model"] == "qwen2.5-7b-shape"
    tables = read_kernel_tables(str(results))
    assert len(tables) == 1 and tables[0]["machine"] == {"accelerator": "H200"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**KERNEL, "step_seconds": -1}), encoding="utf-8")
    with pytest.raises(StudyError, match="step_seconds"):
        read_kernel_tables(str(bad))


def test_quick_preset__explicit_options_win() -> None:
    import argparse

    from backend.__main__ import build_parser

    args = build_parser().parse_args(["study", "--quick", "--limit", "5", "--kernel-n", "8,16,64"])
    config = config_from_args(args)
    assert isinstance(config, StudyConfig) and config.quick
    assert config.limit == 5 and config.kernel_n == (8, 16, 64) and config.ceiling_limit == 6
    full = config_from_args(build_parser().parse_args(["study"]))
    assert full.kernel_n == (8, 16, 32, 64, 128, 256, 512) and full.ceiling_limit is None
    assert isinstance(args, argparse.Namespace)


@pytest.mark.parametrize("argv__message", [
    (["--rates", "0,2"], "rates in [0, 1]"),
    (["--kernel-n", "0,8"], "positive integers"),
    (["--extra-kernel", "/nonexistent/kernel.json"], "no such file"),
    (["--limit", "x"], "integer >= 0"),
])
def test_study__bad_usage_exits_2_in_one_line(argv__message: tuple[list[str], str]) -> None:
    argv, message = argv__message
    done = _study(*argv)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_render_report__kernel_only_document() -> None:
    table = {**KERNEL, "label": "qwen2.5-7b-shape cuda bfloat16 (random weights, timing only)",
             "origin": "measured in this run", "tokenizer": "qwen2.5", "repeats": 3}
    results = {"kind": "study-results", "command": "python -m backend study --kernel-only", "quick": False,
               "machine": {"cpu": "X", "usable_cpus": 16, "ram_gib": 128, "accelerator": "NVIDIA H200",
                           "versions": {}, "date": "today"},
               "model": {"name": "qwen2.5-7b-shape"}, "kernel": {"tables": [table]}, "duration_seconds": 12.0,
               "stages": {"kernel": {"seconds": 11.0}}}
    report = render_report(results)
    assert "| Copy kernel speed-up, N = 8..512 | 6.8x-303x | qwen2.5-7b-shape cuda bfloat16" in report
    assert "7.62x (N=8) to 341x (N=512)" in report
    assert "NVIDIA H200" in report
