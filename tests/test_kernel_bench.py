"""bench-kernel (library, CLI, without the app packages) and mask-cost."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from backend.__main__ import main
from backend.cli.runtime_commands import parse_ns
from backend.measure.kernel_bench import bench_kernel

ROOT = Path(__file__).resolve().parents[1]


def check_kernel_table(document, *, ns, context, model="tiny-random", weights="random (timing only)"):
    """The kernel-table format of docs/DESIGN.md, field by field, plus machine info."""
    assert document["kind"] == "kernel-table"
    assert document["model"] == model and document["weights"] == weights
    assert document["device"] == "cpu" and document["dtype"] == "float32" and document["context"] == context
    assert isinstance(document["step_seconds"], float) and document["step_seconds"] > 0
    assert [row["n"] for row in document["rows"]] == ns
    for row in document["rows"]:
        for key in ("prefill_seconds", "steps_seconds", "speedup"):
            assert isinstance(row[key], float) and row[key] > 0 and math.isfinite(row[key])
        assert row["speedup"] == pytest.approx(row["steps_seconds"] / row["prefill_seconds"])
        assert 0 <= row["max_abs_logit_diff"] < 1e-4 and row["argmax_equal"] is True
    machine = document["machine"]
    assert machine["threads"] >= 1 and machine["versions"]["torch"] and machine["versions"]["transformers"]
    assert machine["cpu"] and machine["device_name"] == machine["cpu"]
    # and the consumer of the table (ceiling --kernel) accepts it
    from backend.data.kernel import KernelTable

    table = KernelTable.from_dict(document)
    assert table.prefill_seconds(ns[-1]) == pytest.approx(document["rows"][-1]["prefill_seconds"])


def test_bench_kernel_function(tiny_model):
    document = bench_kernel(tiny_model, ns=[8, 2], context=16, repeats=2)
    check_kernel_table(document, ns=[2, 8], context=16)
    with pytest.raises(ValueError, match="context length"):
        bench_kernel(tiny_model, ns=[8], context=tiny_model.spec.context_length, repeats=1)
    with pytest.raises(ValueError):
        bench_kernel(tiny_model, ns=[0], context=4, repeats=1)


def test_bench_kernel_cli(tmp_path, capsys):
    out = tmp_path / "kernel.json"
    code = main(["bench-kernel", "--model", "tiny-random", "--n", "4,8", "--repeats", "2", "--context", "32",
                 "--device", "cpu", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.strip().splitlines()
    assert lines[0].startswith("tiny-random") and "speedup" in lines[1]  # the table first
    document = json.loads(lines[-1])  # the JSON last
    check_kernel_table(document, ns=[4, 8], context=32)
    assert json.loads(out.read_text()) == document


@pytest.mark.parametrize(
    "argv__message",
    [
        (["--model", "no-such-model"], "unknown model"),
        (["--model", "tiny-random", "--n", "4,x"], "--n"),
        (["--model", "tiny-random", "--n", "0"], "--n"),
        (["--model", "tiny-random", "--repeats", "0"], "--repeats"),
        (["--model", "tiny-random", "--n", "8", "--context", "9000"], "context length"),
    ],
)
def test_bench_kernel_usage_errors_exit_2_in_one_line(capsys, argv__message):
    argv, message = argv__message
    assert main(["bench-kernel", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ") and message in captured.err


def test_bench_kernel_runs_without_the_app_packages():
    # the GPU image has torch and transformers only: the command line must not import the app's packages
    code = ("import json, sys; from backend.__main__ import main; "
            "code = main(['bench-kernel', '--model', 'tiny-random', '--n', '2', '--context', '8', '--repeats', '1', "
            "'--device', 'cpu']); "
            "print(json.dumps([code, sorted({m.split('.')[0] for m in sys.modules} & {'gradio', 'sqlalchemy', 'plotly'})]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == [0, []]
    check_kernel_table(json.loads(lines[-2]), ns=[2], context=8)


def test_parse_ns():
    assert parse_ns("8,16, 32") == [8, 16, 32]
    for bad in ("", "a", "0", "-4", "4,,x"):
        with pytest.raises(ValueError):
            parse_ns(bad)


def test_mask_cost_cli(capsys):
    assert main(["mask-cost", "--vocab", "smollm2", "--limit", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    document = json.loads(lines[-1])
    assert document["kind"] == "mask-cost" and document["vocab"] == "smollm2" and document["cases"] == 3
    assert document["vocab_size"] == 49152 and document["steps"] > 10
    assert 0 < document["median_us"] <= document["p90_us"]
    assert main(["mask-cost", "--vocab", "smollm2", "--limit", "0"]) == 2


def test_mask_cost_on_each_runtime__masked_pick_against_the_runtimes_step(capsys):
    """Issue 11: the mask's cost on llama.cpp's logits (and torch's), next to that runtime's step."""
    assert main(["mask-cost", "--vocab", "smollm2", "--limit", "2", "--runtime", "torch,llama.cpp"]) == 0
    document = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(document["runtimes"]) == {"torch", "llama.cpp"}
    for name, result in document["runtimes"].items():
        assert result["runtime"] == name and result["states"] == document["steps"]
        assert result["masked_pick_us"] > 0 and result["plain_pick_us"] > 0 and result["step_ms"] > 0
        overhead = result["masked_pick_us"] - result["plain_pick_us"]
        assert result["share_of_step"] == pytest.approx(overhead / (result["step_ms"] * 1000), abs=1e-4)
    assert main(["mask-cost", "--vocab", "qwen2.5", "--limit", "1", "--runtime", "torch"]) == 2
    assert main(["mask-cost", "--vocab", "smollm2", "--limit", "1", "--runtime", "gpu"]) == 2
