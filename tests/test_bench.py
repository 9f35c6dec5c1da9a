"""The `bench` command and its engine (strategy_bench) on the tiny random model and a 2-case corpus."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main
from backend.measure import strategy_bench as sb
from backend.measure.forward_cost import FORWARD_SIZES
from backend.runtime.prompt_lookup import DEFAULT_SETTING, parse_setting

SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
CASES = [
    {"id": "rename", "source": SOURCE, "target": SOURCE.replace("def mul", "def times"), "instruction": "Rename mul."},
    {"id": "swap", "source": SOURCE, "target": SOURCE.replace("a - b", "b - a") + "\n\ndef div(a, b):\n    return a / b\n"},
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    return path


def test_bench_prints_every_strategy_and_one_json_line(corpus, capsys):
    code = main(["bench", str(corpus), "--model", "tiny-random", "--repeats", "1", "--top", "2"])
    out, _err = capsys.readouterr()
    assert code == 0
    document = json.loads(out.strip().splitlines()[-1])
    summary = document["corpora"][str(corpus)]
    assert {"ar", "pld", "pld-best", "cad"} <= set(summary["seconds"]) == set(summary["forwards"])
    assert summary["cases"] == 2 and all(summary["exact"].values())
    assert all(s > 0 for s in summary["seconds"].values())
    # pld-best is the fastest timed setting, the default among them: never slower than pld
    assert summary["seconds"]["pld-best"] <= summary["seconds"]["pld"]
    timed = {label: v for label, v in summary["sweep"].items() if v["seconds"] is not None}
    assert DEFAULT_SETTING.label in timed and len(timed) in (2, 3) and len(summary["sweep"]) == 20
    assert min(v["seconds"] for v in timed.values()) == summary["seconds"]["pld-best"]
    # the model-free forward count of each setting is what the timed replay ran
    best = summary["sweep"][summary["pld_best_setting"]]
    assert best["forwards"] == summary["forwards"]["pld-best"]
    assert summary["sweep"][DEFAULT_SETTING.label]["forwards"] == summary["forwards"]["pld"]
    assert summary["forwards"]["cad"] < summary["forwards"]["ar"]
    # hybrid drafting replaces a decode step's forward, never adds one
    assert summary["forwards"]["cad-hybrid"] <= summary["forwards"]["cad"] and summary["exact"]["cad-hybrid"]
    assert summary["tags"]["cad"]["copies"] > 0 and summary["tags"]["cad"]["tag_steps_per_copy"] > 0
    # tag drafts (the next item's opening checked with the copy's forward) save steps, same output
    untagged, tagged = summary["tags"]["cad-no-tag-drafts"], summary["tags"]["cad"]
    assert summary["exact"]["cad-no-tag-drafts"] and untagged["tag_drafts_accepted"] == 0
    assert tagged["tag_drafts_accepted"] > 0 and tagged["tag_steps_per_copy"] < untagged["tag_steps_per_copy"]
    assert summary["forwards"]["cad"] == summary["forwards"]["cad-no-tag-drafts"] - tagged["tag_drafts_accepted"]
    ratio = summary["speedup_vs_ar"]["cad"]
    assert ratio == pytest.approx(summary["seconds"]["ar"] / summary["seconds"]["cad"])
    assert "pld-best = " + summary["pld_best_setting"] in out and parse_setting(summary["pld_best_setting"])
    # the closed-form bound of the same programs, priced by this run's forward costs
    bound = summary["vs_bound"]
    assert bound["bound_plain_seconds"] > 0 and bound["bound_copy_seconds"] > 0 and bound["copy_spans"] >= 2
    assert bound["bound_speedup"] == pytest.approx(bound["bound_plain_seconds"] / bound["bound_copy_seconds"])
    assert set(bound["share_of_bound"]) == {"cad", "cad-hybrid", "cad-no-tag-drafts"}
    assert bound["share_of_bound"]["cad"] == pytest.approx(ratio / bound["bound_speedup"])
    assert f"cad measured {bound['share_of_bound']['cad']:.0%} of it" in out
    # and priced after each forward's own context
    assert bound["context_bound_speedup"] == pytest.approx(
        bound["context_bound_plain_seconds"] / bound["context_bound_copy_seconds"])
    assert bound["share_of_context_bound"]["cad"] == pytest.approx(ratio / bound["context_bound_speedup"])
    assert f"(context-priced bound {bound['context_bound_speedup']:.3g}x" in out


@pytest.mark.parametrize("argv__message", [
    (["bench", "no-such-corpus", "--model", "tiny-random"], "no-such-corpus"),
    (["bench", "CORPUS", "--limit", "0"], "must be >= 1"),
    (["bench", "CORPUS", "--model", "tiny-random", "--runtime", "gpu"], "unknown runtime"),
])
def test_bench_usage_errors(corpus, capsys, argv__message):
    argv, message = argv__message
    code = main([str(corpus) if a == "CORPUS" else a for a in argv])
    _out, err = capsys.readouterr()
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_shortlist():
    ranked = {parse_setting(f"{n}/10"): {"predicted_seconds": float(5 - n), "forwards": 1} for n in (1, 2, 3, 4)}
    assert sb.shortlist(ranked, 1) == [DEFAULT_SETTING, parse_setting("4/10")]
    assert sb.shortlist(ranked, 3) == [DEFAULT_SETTING, parse_setting("4/10"), parse_setting("3/10")]


def test_library_check_agrees_with_transformers_generate(tiny_model):
    from backend.data.cases import EditCase
    from backend.runtime.engine import EditEngine

    engine = EditEngine(tiny_model)
    cases = [EditCase(id=c["id"], source=c["source"], target=c["target"], instruction=c.get("instruction"))
             for c in CASES]
    check = sb.library_check(engine, sb.prepare_cases(engine, cases), max_new_tokens=12)
    assert check["cases"] == 2 and check["same_output"] == {"ar": 2, "pld": 2}
    assert 0 < check["generated_tokens"] <= 24 and all(s > 0 for s in check["seconds"].values())


def test_bench_on_both_cpu_runtimes_in_one_run(corpus, tmp_path, capsys):
    """Issue 11: torch and llama.cpp timed in one process on the same cases (the embedded model:
    llama.cpp runs its GGUF), each runtime's plain step and every strategy against the fastest plain."""
    one = tmp_path / "one.jsonl"
    one.write_text(corpus.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    code = main(["bench", str(one), "--runtime", "torch,llama.cpp", "--repeats", "1", "--top", "1"])
    out, _err = capsys.readouterr()
    assert code == 0, out
    document = json.loads(out.strip().splitlines()[-1])
    assert set(document["runtimes"]) == {"torch", "llama.cpp"}
    for runtime in ("torch", "llama.cpp"):
        result = document["runtimes"][runtime]
        assert result["step_seconds"] > 0
        summary = result["corpora"][str(one)]
        assert all(summary["exact"].values()) and summary["forwards"]["cad"] < summary["forwards"]["ar"]
    fastest = document["fastest_plain"][str(one)]
    versus = document["versus_fastest_plain"][str(one)]
    assert versus[f"{fastest}/ar"] == pytest.approx(1.0)
    plain = {rt: document["runtimes"][rt]["corpora"][str(one)]["seconds"]["ar"] for rt in ("torch", "llama.cpp")}
    assert fastest == min(plain, key=plain.get)
    cad = document["runtimes"]["llama.cpp"]["corpora"][str(one)]["seconds"]["cad"]
    assert versus["llama.cpp/cad"] == pytest.approx(plain[fastest] / cad)
    assert "against the fastest plain decoding" in out and "== llama.cpp (plain decode step" in out


def test_bench_refuses_a_runtime_named_twice(corpus, capsys):
    assert main(["bench", str(corpus), "--runtime", "torch,torch"]) == 2
    assert "name each runtime once" in capsys.readouterr().err


def test_bench_skips_cases_too_long_for_the_context_and_says_which(tmp_path, capsys):
    """A real commit file can exceed a small model's context: the bench used to stop at the first
    one. Now --limit counts cases that fit, and the skipped ones are listed."""
    long = "".join(f"value_{i} = {i} * {i}\n" for i in range(1500))  # ~10k tokens: cannot fit 8,192
    cases = [{"id": "huge", "source": long, "target": long.replace("value_7 ", "value_seven ")}, CASES[0], CASES[1]]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    code = main(["bench", str(path), "--model", "tiny-random", "--repeats", "1", "--top", "1", "--limit", "1"])
    out, _err = capsys.readouterr()
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])["corpora"][str(path)]
    assert summary["cases"] == 1 and summary["skipped_too_long"] == ["huge"]
    assert "skipped as too long for the context: 1" in out


def test_bench_skip_leaves_out_the_optional_variants_and_warms_up_on_the_cheapest_case(tmp_path, capsys):
    """On long files every strategy replays the whole file repeats + 1 times; --skip drops the
    optional copy-as-decode variants (never ar, pld, pld-best or cad, which define the ratios), and
    the warm-up round runs on the case with the fewest target tokens, not the first."""
    corpus = tmp_path / "longer-first.jsonl"
    corpus.write_text("".join(json.dumps(c) + "\n" for c in [CASES[1], CASES[0]]), encoding="utf-8")
    code = main(["bench", str(corpus), "--model", "tiny-random", "--repeats", "1", "--top", "1",
                 "--skip", "cad-hybrid", "--skip", "cad-no-tag-drafts", "--prompt-reuse"])
    out, err = capsys.readouterr()
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])["corpora"][str(corpus)]
    assert set(summary["seconds"]) == {"ar", "pld", "pld-best", "cad"}
    assert set(summary["vs_bound"]["share_of_bound"]) == {"cad"} and set(summary["tags"]) == {"cad"}
    assert "warm-up round on rename " in err  # the second case: its target is the shorter
    assert "forward-cost table after" in err
    forward = summary["forward_cost"]
    assert forward["contexts"] and all(int(c) > 0 for c in forward["contexts"])
    for context, table in forward["contexts"].items():
        assert set(table) == {str(n) for n in FORWARD_SIZES} and all(s > 0 for s in table.values())
        assert f"one forward after {context} tokens: 1 tokens" in out
    # --prompt-reuse: both prompts of the file, read again on a second edit, keep all but the instruction
    reuse = summary["prompt_reuse"]
    assert set(reuse) == {"cad", "plain"} and all(0 < r["kept_tokens"] < r["prompt_tokens"] for r in reuse.values())
    assert "prompt reuse (a second edit of the same file): cad prompt" in out


def test_only_the_optional_variants_can_be_skipped(corpus, capsys):
    from backend.cli.bench_command import SKIPPABLE

    assert SKIPPABLE == sb.OPTIONAL_VARIANTS
    with pytest.raises(ValueError, match="only cad-hybrid, cad-no-tag-drafts are optional"):
        sb.runners(object(), [DEFAULT_SETTING], skip=("ar",))
    assert main(["bench", str(corpus), "--model", "tiny-random", "--skip", "pld-best"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_bench_predict_only_times_no_strategy(corpus, capsys):
    """--predict-only: the forward costs are timed, no strategy is; predicted seconds of plain
    decoding, the default and best-predicted prompt lookup, and copy-as-decode's context-priced bound."""
    code = main(["bench", str(corpus), "--model", "tiny-random", "--predict-only"])
    out, err = capsys.readouterr()
    assert code == 0, out
    summary = json.loads(out.strip().splitlines()[-1])["corpora"][str(corpus)]
    predicted = summary["predicted_seconds"]
    assert set(predicted) == {"ar", "pld", "pld-best", "cad-bound"} and all(s > 0 for s in predicted.values())
    assert "seconds" not in summary and "warm-up round" not in err and "round 1/" not in err
    sweep = summary["sweep"]
    assert len(sweep) == 20 and all(v["seconds"] is None for v in sweep.values())
    assert predicted["pld-best"] == min(v["predicted_seconds"] for v in sweep.values()) <= predicted["pld"]
    assert predicted["pld"] == sweep[DEFAULT_SETTING.label]["predicted_seconds"]
    bound = summary["vs_bound"]
    assert predicted["ar"] == bound["context_bound_plain_seconds"] and predicted["cad-bound"] == bound["context_bound_copy_seconds"]
    assert summary["speedup_vs_pld_best"]["cad-bound"] == pytest.approx(predicted["pld-best"] / predicted["cad-bound"])
    per_case = summary["per_case"]  # each case at the corpus's best setting; they sum to the corpus
    assert set(per_case) == {c["id"] for c in CASES}
    for key in ("ar", "pld-best", "cad-bound"):
        assert sum(c[key] for c in per_case.values()) == pytest.approx(predicted[key])
    assert "predicted, nothing timed" in out and "cad-bound" in out
    assert main(["bench", str(corpus), "--model", "tiny-random", "--predict-only", "--runtime", "torch,llama.cpp"]) == 2
    assert "--predict-only takes one runtime" in capsys.readouterr().err
