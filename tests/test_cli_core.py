"""The core commands through `python -m backend`: exit codes, the last-line JSON, exact bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.data.corpora import EditCase, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "backend", *args], cwd=ROOT, capture_output=True, timeout=120)
    if check_rc is not None:
        assert result.returncode == check_rc, result.stderr.decode()
    return result


def last_json(result: subprocess.CompletedProcess) -> dict:
    return json.loads(result.stdout.decode("utf-8").rstrip("\n").splitlines()[-1])


def assert_usage_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in stderr, stderr


@pytest.fixture()
def small_corpus(tmp_path) -> Path:
    cases = [
        EditCase("crlf", "one\r\ntwo\r\nthree", "one\r\n2\r\nthree", "digits", "text"),
        EditCase("lf", "def f(x):\n    return x - 1\n\n\nprint(f(2))\n", "def f(x):\n    return x + 1\n\n\nprint(f(2))\n"),
        EditCase("tricky", "a</gen>\rb\n<copy lines=\"1-1\"/>\n", "a</gen>\rb\n<copy lines=\"1-2\"/>\nz"),
    ]
    path = tmp_path / "small.jsonl"
    write_jsonl(cases, path)
    return path


# --- resolve / program: filters with exact bytes ----------------------------------------------------

def test_resolve_writes_exact_bytes_crlf_no_trailing_newline(tmp_path):
    (tmp_path / "src").write_bytes(b"one\r\ntwo\r\nthree")
    (tmp_path / "prog").write_bytes(b'<copy lines="1-1"/>\n<gen>2\r\n</gen>\n<copy lines="3-3"/>')
    result = run("resolve", "--source", str(tmp_path / "src"), "--program", str(tmp_path / "prog"))
    assert result.stdout == b"one\r\n2\r\nthree"


def test_resolve_lone_cr_and_unicode(tmp_path):
    (tmp_path / "src").write_bytes("α\rβ\r\nγ".encode())
    (tmp_path / "prog").write_bytes(b'<copy lines="3-3"/><copy lines="1-2"/>')
    assert run("resolve", "--source", str(tmp_path / "src"), "--program", str(tmp_path / "prog")).stdout == "γα\rβ\r\n".encode()


@pytest.mark.parametrize("granularity", ["line", "token"])
@pytest.mark.parametrize("objective", ["cost", "coverage"])
def test_program_then_resolve_round_trips(tmp_path, granularity, objective):
    source = b"import os\r\n\r\ndef main():\r\n    print(os.getcwd())\r\n    return 0\r\n\r\nmain()"
    target = b"import os\r\n\r\ndef main():\r\n    print(os.getcwd(), 1)\r\n    return 0\r\n\r\nmain()"
    (tmp_path / "s").write_bytes(source)
    (tmp_path / "t").write_bytes(target)
    program = run("program", "--source", str(tmp_path / "s"), "--target", str(tmp_path / "t"),
                  "--granularity", granularity, "--objective", objective).stdout
    assert program.startswith(b"<copy ") or program.startswith(b"<gen>")
    (tmp_path / "p").write_bytes(program)
    assert run("resolve", "--source", str(tmp_path / "s"), "--program", str(tmp_path / "p")).stdout == target


def test_resolve_bad_inputs_exit_2(tmp_path):
    (tmp_path / "src").write_bytes(b"a\nb\n")
    (tmp_path / "latin1").write_bytes(b"caf\xe9\n")
    (tmp_path / "bad").write_bytes(b'<copy lines="2-1"/>')
    (tmp_path / "far").write_bytes(b'<copy lines="1-9"/>')
    src = str(tmp_path / "src")
    assert_usage_error(run("resolve", "--source", str(tmp_path / "missing"), "--program", src, check_rc=None),
                       "no such file")
    assert_usage_error(run("resolve", "--source", str(tmp_path / "latin1"), "--program", str(tmp_path / "far"),
                           check_rc=None), "not valid UTF-8")
    assert_usage_error(run("resolve", "--source", src, "--program", str(tmp_path / "bad"), check_rc=None),
                       "at char 0", "start > end")
    assert_usage_error(run("resolve", "--source", src, "--program", str(tmp_path / "far"), check_rc=None),
                       "op 1", "the input has 2 lines")
    assert_usage_error(run("resolve", "--source", src, check_rc=None), "--program")


# --- table + last-line JSON commands ----------------------------------------------------------------

def test_roundtrip_small_corpus_and_real_humanevalpack(small_corpus):
    result = run("roundtrip", str(small_corpus), "humanevalpack-python")
    document = last_json(result)
    assert document["command"] == "roundtrip"
    assert document["corpora"][str(small_corpus)] | {"seconds": 0} == {
        "cases": 3, "programs": 12, "ok": 12, "failed": 0, "failures": [], "seconds": 0}
    assert document["corpora"]["humanevalpack-python"]["ok"] == 164 * 4
    assert document["pooled"] == {"programs": 12 + 164 * 4, "ok": 12 + 164 * 4, "failed": 0}
    assert b"pooled" in result.stdout


def test_ceiling_with_kernel(small_corpus, tmp_path):
    from backend.measure.ceiling import bound, case_ceiling, costs_from_kernel
    from backend.data.corpora import read_jsonl
    from backend.data.kernel import KernelTable
    from backend.tokenizers import load_tokenizer

    kernel_doc = {"kind": "kernel-table", "model": "t", "step_seconds": 0.07,
                  "rows": [{"n": 8, "prefill_seconds": 0.09}, {"n": 128, "prefill_seconds": 0.47}]}
    (tmp_path / "k.json").write_text(json.dumps(kernel_doc), encoding="utf-8")
    result = run("ceiling", str(small_corpus), "--kernel", str(tmp_path / "k.json"), "--granularity", "line")
    document = last_json(result)
    assert document["headline_objective"] == "cost"
    entry = document["corpora"][str(small_corpus)]
    assert set(entry) == {"cases", "gold_tokens", "line"}
    # the same numbers in process
    kernel = KernelTable.load(tmp_path / "k.json")
    tokenize = load_tokenizer("qwen2.5")
    results = [case_ceiling(c, tokenize=tokenize, granularities=("line",), costs=costs_from_kernel(kernel))
               for c in read_jsonl(small_corpus)]
    for objective in ("coverage", "cost"):
        stats = [r.stats["line", objective] for r in results]
        assert entry["line"][objective]["copied_tokens"] == sum(s.copied_tokens for s in stats)
        assert entry["line"][objective]["bound"]["speedup"] == pytest.approx(bound(stats, kernel).speedup)
    assert entry["gold_tokens"] == sum(r.stats["line", "cost"].gold_tokens for r in results)
    assert b"bound (cost)" in result.stdout


def test_ceiling_two_corpora_pooled(small_corpus):
    document = last_json(run("ceiling", str(small_corpus), "humanevalpack-js", "--limit", "5"))
    assert document["kernel"] is None
    assert document["corpora"]["humanevalpack-js"]["cases"] == 5
    pooled = document["pooled"]
    assert pooled["cases"] == 8
    for granularity in ("line", "token"):
        assert pooled[granularity]["coverage"]["copied_tokens"] == sum(
            document["corpora"][name][granularity]["coverage"]["copied_tokens"] for name in document["corpora"])


def test_perturb_table_and_json(small_corpus):
    result = run("perturb", "humanevalpack-js", str(small_corpus), "--rate", "0", "1", "--seed", "3")
    document = last_json(result)
    assert document["rates"] == [0.0, 1.0] and document["seed"] == 3
    assert document["pooled"][0]["exact_rate"] == 1.0
    assert document["pooled"][1]["exact"] < document["pooled"][1]["cases"] == 167
    assert result.stdout.decode().splitlines()[0].startswith("Exact match")


def test_probe_writes_cases_and_manifest(tmp_path):
    out = tmp_path / "probe.jsonl"
    document = last_json(run("probe", "--out", str(out), "--count", "10", "--seed", "2"))
    assert document["cases"] == 10
    from backend.data.corpora import read_jsonl
    from backend.data.probe import generate_probe

    cases = read_jsonl(out)
    assert [c.target for c in cases] == [c.target for c in generate_probe(seed=2, count=10)]
    manifest = json.loads((tmp_path / "probe.manifest.json").read_text(encoding="utf-8"))
    assert manifest["seed"] == 2 and manifest["case_ids"] == [c.id for c in cases]
    assert {c.meta["stdlib_file"] for c in cases} <= {f["name"] for f in manifest["files"]}


@pytest.mark.parametrize(
    "args__fragments",
    [
        (("ceiling", "no-such-corpus"), ("unknown corpus",)),
        (("ceiling", "commits", "--data-dir", "/nonexistent/dir"), ("does not exist",)),
        (("ceiling", "humanevalpack-python", "--data-dir", "/tmp"), ("bigcode/humanevalpack",)),
        (("ceiling", "humanevalpack-python", "--kernel", "/nonexistent.json"), ("kernel table", "cannot read")),
        (("ceiling", "humanevalpack-python", "--limit", "0"), ("--limit",)),
        (("perturb", "humanevalpack-python", "--rate", "1.5"), ("--rate",)),
        (("perturb", "humanevalpack-python", "--rate", "x"), ("invalid float",)),
        (("roundtrip",), ("CORPUS",)),
        (("program", "--source", "/nonexistent", "--target", "/nonexistent"), ("no such file",)),
        (("probe", "--out", "/nonexistent/dir/p.jsonl"), ("does not exist",)),
    ],
)
def test_bad_usage_exits_2_in_one_line(args__fragments):
    args, fragments = args__fragments
    assert_usage_error(run(*args, check_rc=None), *fragments)


def test_bad_corpus_file_exits_2_naming_the_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_bytes(b'{"id": "a", "source": "", "target": ""}\n{"id": "b"\n')
    assert_usage_error(run("roundtrip", str(path), check_rc=None), "broken.jsonl:2")


def test_apply_snippet_counts_merges_and_refusals():
    from backend.core.snippet_apply import REFUSAL_KINDS

    fixture = "tests/fixtures/cad-dev-subset.jsonl"
    doc = last_json(run("apply-snippet", fixture))["corpora"][fixture]
    assert doc["cases"] == 14 and doc["snippets"] == 2 and doc["exact"] == 2 and doc["wrong"] == 0
    # every case's own edit as an update snippet (2 context lines): the real HumanEvalFix-JS fixes
    doc = last_json(run("apply-snippet", "humanevalpack-js", "--limit", "30", "--from-diff", "2"))["corpora"]["humanevalpack-js"]
    assert doc["snippets"] > 10 and doc["exact"] + doc["wrong"] + doc["refused"] == doc["snippets"]
    assert doc["exact"] >= 0.8 * doc["snippets"] and doc["wrong"] <= 1
    assert sum(doc["refusals"].values()) == doc["refused"] and set(doc["refusals"]) <= set(REFUSAL_KINDS)


def test_apply_snippet_applies_unified_diffs_too():
    doc = last_json(run("apply-snippet", "humanevalpack-python", "--limit", "20", "--from-diff", "2", "--as-diff"))
    doc = doc["corpora"]["humanevalpack-python"]
    assert doc["snippets"] == 20 and doc["exact"] == 20 and doc["wrong"] == 0


def test_apply_snippet_bad_usage():
    assert_usage_error(run("apply-snippet", "no-such-corpus", check_rc=None), "no-such-corpus")
