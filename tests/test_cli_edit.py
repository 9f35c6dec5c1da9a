"""`python -m backend edit` and `replay` on the tiny model: output contract and exit codes."""

import json

import pytest

from backend.__main__ import main

SOURCE = "def area(w, h):\n    return w + h\n\n\nprint(area(2, 3))\n"
TARGET = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n"


@pytest.fixture
def files(tmp_path):
    source = tmp_path / "source.py"
    target = tmp_path / "target.py"
    source.write_bytes(SOURCE.encode())
    target.write_bytes(TARGET.encode())
    return source, target


def last_json(text):
    return json.loads(text.rstrip("\n").splitlines()[-1])


@pytest.mark.parametrize("strategy", ["cad", "ar", "pld"])
def test_edit_reference_mode_prints_the_target_and_one_json_line(files, capsys, strategy):
    source, target = files
    code = main(["edit", "--model", "tiny-random", "--source", str(source), "--target", str(target),
                 "--instruction", "Compute the area.", "--strategy", strategy])
    out, err = capsys.readouterr()
    assert code == 0
    document = last_json(out)
    assert document["command"] == "edit" and document["mode"] == "reference"
    assert document["exact_match"] is True and document["output"] == TARGET
    assert document["strategy"] == strategy
    assert out.startswith(TARGET)
    assert document["metrics"]["forwards"] > 0
    if strategy == "cad":
        assert '<copy lines="' in err  # the program streamed to stderr
        assert document["program"].startswith("<")
    else:
        assert "return w * h" in err


def test_edit_model_mode_streams_and_reports(files, capsys):
    source, _ = files
    code = main(["edit", "--model", "tiny-random", "--source", str(source), "--instruction", "x",
                 "--max-new-tokens", "6", "--temperature", "1.0", "--seed", "3"])
    out, err = capsys.readouterr()
    assert code == 0
    document = last_json(out)
    assert document["mode"] == "model" and document["strategy"] == "cad"
    assert document["stop_reason"] in ("eos", "max_tokens")
    assert document["metrics"]["program_tokens"] <= 6 + 4  # a jump-forward may finish a tag
    assert "tokens_per_second" in out


@pytest.mark.parametrize(
    "argv__message",
    [
        (["edit", "--model", "tiny-random", "--source", "/nonexistent/file.py"], "no such file"),
        (["edit", "--model", "no-such-model", "--source", "SOURCE"], "unknown model"),
        (["edit", "--model", "tiny-random", "--source", "SOURCE", "--strategy", "fast"], "invalid choice"),
        (["edit", "--model", "tiny-random", "--source", "SOURCE", "--max-new-tokens", "0"], "must be >= 1"),
        (["edit", "--model", "tiny-random", "--source", "SOURCE", "--instruction", "x", "--temperature", "-1"], "temperature"),
        (["edit", "--model", "tiny-random", "--source", "BINARY"], "not valid UTF-8"),
        (["replay", "no-such-corpus", "--model", "tiny-random"], "unknown corpus"),
        (["replay", "humanevalpack-python", "--limit", "0", "--model", "tiny-random"], "--limit must be >= 1"),
    ],
)
def test_errors_exit_2_with_one_line(files, tmp_path, capsys, argv__message):
    argv, message = argv__message
    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    argv = [str(files[0]) if a == "SOURCE" else str(binary) if a == "BINARY" else a for a in argv]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]


def test_replay_a_corpus_file(tmp_path, capsys):
    cases = [
        {"id": "area", "source": SOURCE, "target": TARGET, "instruction": "Compute the area."},
        {"id": "crlf", "source": "a = 1\r\nb = 2\r\nc = 3\r\nd = 4\r\n", "target": "a = 1\r\nb = 20\r\nc = 3\r\nd = 4\r\n"},
        {"id": "emoji", "source": "x = 1\ny = 2\nz = 3\n", "target": "x = 1\ny = '😀'\nz = 3\n"},
    ]
    corpus = tmp_path / "cases.jsonl"
    corpus.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    code = main(["replay", str(corpus), "--model", "tiny-random"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = last_json(out)
    assert document["command"] == "replay" and document["model"] == "tiny-random"
    summary = document["summary"][str(corpus)]
    assert summary["cases"] == 3 and summary["all_exact"]
    for strategy in ("cad", "ar", "pld", "pld_tuned"):
        assert summary[strategy]["exact"] == 3
        assert summary[strategy]["forwards"] > 0
    assert set(summary["speedup"]) == {"cad_vs_ar", "pld_vs_ar", "cad_vs_pld", "pld_tuned_vs_ar", "cad_vs_pld_tuned"}
    assert document["tuned_lookup"] == "3-gram/64"
    assert all(v > 0 for v in summary["speedup"].values())
    assert summary["boundary"]["jump_forward_tokens"] > 0
    assert len(document["cases"]) == 3
    case = document["cases"][0]
    assert case["speedup"]["cad_vs_ar"] == pytest.approx(case["ar"]["wall_seconds"] / case["cad"]["wall_seconds"], rel=1e-3)
    assert "cad/ar" in out and "[replay]" in err


def test_replay_two_corpora_adds_pooled_and_limit(capsys):
    code = main(["replay", "humanevalpack-python", "humanevalpack-js", "--model", "tiny-random", "--limit", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = last_json(out)
    assert set(document["summary"]) == {"humanevalpack-python", "humanevalpack-js", "pooled"}
    assert document["summary"]["pooled"]["cases"] == 2
    assert document["summary"]["pooled"]["all_exact"]
    # one pooling rule (backend.measure.replay): ratios of summed seconds, not a median of per-case ratios
    pooled, cases = document["summary"]["pooled"], document["cases"]
    assert pooled["ar"]["wall_seconds"] == pytest.approx(sum(c["ar"]["wall_seconds"] for c in cases), rel=1e-3)
    assert pooled["speedup"]["cad_vs_ar"] == pytest.approx(
        sum(c["ar"]["wall_seconds"] for c in cases) / sum(c["cad"]["wall_seconds"] for c in cases), rel=1e-3)


def test_replay_tunes_prompt_lookup_on_a_dev_split_it_never_times(capsys):
    """Issue 10 item 1: `--tune-on K` picks the setting per corpus on the K cases after the replayed ones."""
    from backend.data.corpora import load_corpus
    from backend.runtime.prompt_lookup import SWEEP

    code = main(["replay", "humanevalpack-python", "--model", "tiny-random", "--limit", "1", "--tune-on", "3"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    document = last_json(out)
    tuned = document["tuned_by_corpus"]["humanevalpack-python"]
    ids = [case.id for case in load_corpus("humanevalpack-python", None)[:4]]
    assert tuned["dev_cases"] == ids[1:] and [c["id"] for c in document["cases"]] == ids[:1]
    assert tuple(tuned["setting"]) in {(s.ngram, s.drafts) for s in SWEEP}
    assert document["tuned_lookup"] == "per corpus, chosen on a dev split" and "tuned on 3 dev cases" in err
    assert main(["replay", "humanevalpack-python", "--model", "tiny-random", "--tune-on", "3"]) == 2


class _EngineReturning:
    """A stand-in engine (logic test of the command's reporting): one done event with `output`."""

    name = "stand-in"

    def __init__(self, output, stop_reason="eos", restart=None):
        self.output, self.stop_reason, self.copy_rest, self.restart = output, stop_reason, True, restart

    def run(self, source, instruction, **options):
        from backend.runtime.events import DecodeEvent, DecodeMetrics, DecodeResult

        metrics = DecodeMetrics(tokens_copied=9, tokens_generated=0, tokens_tag=8, forwards=2, wall_seconds=0.1,
                                prefill_seconds=0.1, tokens_per_second=90.0, jump_forward_tokens=0,
                                boundary_retokenized=0, accepted_draft_tokens=0, output_tokens=9, prompt_tokens=30)
        result = DecodeResult("cad", "model", self.output, '<copy lines="1-5"/>', self.stop_reason != "eos",
                              self.stop_reason, None, metrics)
        if self.restart:  # backend/runtime/window_retry.py
            yield DecodeEvent("gen", "abandoned text", 1, 1, 0.05)
            yield DecodeEvent("restart", self.restart, 0, 0, 0.0)
        yield DecodeEvent("done", "", 0, 2, 0.1, result)


@pytest.mark.parametrize("output, unchanged", [(SOURCE, True), (TARGET, False)])
def test_edit_model_mode__an_output_equal_to_the_input_is_said(files, capsys, monkeypatch, output, unchanged):
    import backend.cli.edit_commands as edit_commands

    engine = _EngineReturning(output)
    def load_engine(*args, copy_rest=True, **kwargs):
        engine.copy_rest = copy_rest  # what open_engine does with it
        return engine

    monkeypatch.setattr(edit_commands, "load_engine", load_engine)
    code = main(["edit", "--source", str(files[0]), "--instruction", "Multiply.", "--no-copy-rest"])
    out, err = capsys.readouterr()
    assert code == 0 and engine.copy_rest is False  # --no-copy-rest reached the engine
    assert last_json(out).get("unchanged", False) is unchanged
    assert ("the model's program changed nothing" in err) is unchanged


def test_edit_model_mode__a_restarted_edit_says_so_in_the_stream(files, capsys, monkeypatch):
    import backend.cli.edit_commands as edit_commands

    note = "in lines 1-300 of 900 the model's program reached the token limit without finishing the edit, so ..."
    monkeypatch.setattr(edit_commands, "load_engine", lambda *args, **kwargs: _EngineReturning(TARGET, restart=note))
    code = main(["edit", "--source", str(files[0]), "--instruction", "Multiply."])
    _, err = capsys.readouterr()
    assert code == 0 and f"abandoned text\n[restarted: {note}]\n" in err


@pytest.mark.parametrize("flag, aligned", [([], True), (["--no-align-snippets"], False)])
def test_edit_model_mode__an_update_snippet_is_merged_by_the_aligner_unless_turned_off(files, capsys, flag, aligned):
    source, _ = files
    snippet = "Apply this update:\n```\n# ... existing code ...\ndef area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n```"
    code = main(["edit", "--model", "tiny-random", "--source", str(source), "--instruction", snippet,
                 "--max-new-tokens", "6", *flag])
    out, err = capsys.readouterr()
    assert code == 0
    document = last_json(out)
    assert (document["metrics"].get("written_by") == "snippet aligner") is aligned
    assert ("written by the snippet aligner, not the model" in err) is aligned
    if aligned:
        assert document["output"] == TARGET and document["mode"] == "model"
