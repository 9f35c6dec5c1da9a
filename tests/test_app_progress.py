"""The run tracker, the presentation helpers and the charts: pure logic, no model, no browser.

Moved from tests/test_app_handlers.py (the tracker and chart tests, assertions kept; the metric
texts are now keyed by metric name instead of "m_<name>" widget keys)."""

from __future__ import annotations

import pytest

from app import charts
from app.present import adopt_line_endings, finish_text, format_metrics, is_failure, is_unchanged, line_endings
from app.progress import RunTracker, Snapshot
from app.tabs.compare import compare_row, compare_table, length_note
from backend.runtime.events import DecodeEvent, DecodeMetrics, DecodeResult


def _metrics(**overrides) -> DecodeMetrics:
    fields = dict(tokens_copied=4, tokens_generated=2, tokens_tag=15, forwards=18, wall_seconds=0.3,
                  prefill_seconds=0.05, tokens_per_second=20.0, jump_forward_tokens=0, boundary_retokenized=0,
                  accepted_draft_tokens=0, output_tokens=6, prompt_tokens=40)
    fields.update(overrides)
    return DecodeMetrics(**fields)


def test_tracker_metrics_and_summary_from_events():
    tracker = RunTracker("cad", step_seconds=0.1)
    for event in [
        DecodeEvent("tag", '<copy lines="1-2"/>', 9, 9, 0.2),
        DecodeEvent("copy", "a\nb\n", 4, 10, 0.25),
        DecodeEvent("tag", "<gen>", 3, 13, 0.3),
        DecodeEvent("gen", "c", 1, 14, 0.4),
        DecodeEvent("gen", "\n", 1, 15, 0.5),
        DecodeEvent("tag", "</gen>\n", 3, 18, 0.6),
    ]:
        tracker.add(event)
    snap = tracker.snapshot()
    assert snap.spans == (('<copy lines="1-2"/>', "tag"), ("a\nb\n", "copy"), ("<gen>", "tag"), ("c\n", "gen"),
                          ("</gen>\n", "tag"))
    assert snap.output == "a\nb\nc\n" and snap.program == '<copy lines="1-2"/><gen>c\n</gen>\n'
    assert snap.metrics["tokens_copied"] == 4 and snap.metrics["tokens_generated"] == 2
    assert snap.metrics["estimated_plain_seconds"] == pytest.approx(0.6)
    assert snap.metrics["speedup"] == pytest.approx(1.0)
    result = DecodeResult("cad", "model", "a\nb\nc\n", '<copy lines="1-2"/>\n<gen>c\n</gen>\n', False, "eos", None,
                          _metrics())
    tracker.add(DecodeEvent("done", "", 0, 18, 0.3, result))
    final = tracker.snapshot()
    assert final.done and final.metrics["speedup"] == pytest.approx(2.0)
    assert final.program == result.program
    summary = tracker.event_summary()
    assert summary["tokens"] == {"copy": 4, "gen": 2, "tag": 15} and summary["events"]["gen"] == 2
    assert summary["spans"][1] == ["copy", "a\nb\n"]
    shown = format_metrics(final.metrics)
    assert shown["speedup"] == "2.00×" and shown["elapsed"] == "0.30 s"


def test_accepted_drafts_are_their_own_kind_and_count_as_output():
    tracker = RunTracker("pld", step_seconds=0.1)
    for event in [DecodeEvent("gen", "def ", 2, 2, 0.1), DecodeEvent("draft", "f(x):\n", 4, 3, 0.2),
                  DecodeEvent("gen", "  pass\n", 2, 5, 0.3)]:
        tracker.add(event)
    snap = tracker.snapshot()
    assert snap.spans == (("def ", "gen"), ("f(x):\n", "draft"), ("  pass\n", "gen"))
    assert snap.output == "def f(x):\n  pass\n" and snap.metrics["tokens_generated"] == 8
    assert tracker.event_summary()["tokens"]["draft"] == 4


def test_charts_are_plain_plotly_figures():
    figure = charts.tokens_over_time([(0.0, 0), (0.5, 10)], step_seconds=0.1)
    assert [trace.name for trace in figure.data][0] == "copy-as-decode"
    assert list(figure.data[1].x) == [0.0, pytest.approx(1.0)]
    bars = charts.comparison([{"strategy": "ar", "wall_seconds": 2.0, "forwards": 40, "tokens_per_second": 20.0},
                              {"strategy": "cad", "wall_seconds": 0.5, "forwards": 9, "tokens_per_second": 80.0}])
    assert len(bars.data) == 3 and list(bars.data[1].y) == [40.0, 9.0]


def test_finish_text__says_how_much_of_the_prompt_a_second_edit_kept():
    snapshot = _done("eos")
    snapshot.metrics.update(prefill_seconds=0.4, prompt_tokens=3120, prompt_reused_tokens=3101)
    assert "1.00 s decoding + 0.40 s reading the prompt (3,101 of its 3,120 tokens kept from the last run)" in (
        finish_text(snapshot, mode="model"))
    snapshot.metrics.pop("prompt_reused_tokens")  # a cold read says nothing about reuse
    text = finish_text(snapshot, mode="model")
    assert "0.40 s reading the prompt (eos)" in text and "kept from the last run" not in text


def test_finish_text__says_when_the_decoder_copied_the_rest_of_the_input():
    snapshot = _done("eos")
    assert "copied unchanged" not in finish_text(snapshot, mode="model")
    snapshot.metrics["copied_rest"] = "100-155"  # backend/runtime/early_end.py
    assert "the model's program ended early, so input lines 100-155 were copied unchanged" in (
        finish_text(snapshot, mode="model"))


def test_finish_text__says_who_wrote_a_snippet_edit():
    snapshot = _done("eos")
    assert "aligner" not in finish_text(snapshot, mode="model")
    snapshot.metrics["written_by"] = "snippet aligner"  # backend/core/snippet_apply.py
    assert "written by the snippet aligner, not the model" in finish_text(snapshot, mode="model")
    del snapshot.metrics["written_by"]
    snapshot.metrics["aligner_declined"] = "part 1 of the snippet matches more than one place"
    assert "the snippet aligner left this edit to the model: part 1 of the snippet matches more than one place" in (
        finish_text(snapshot, mode="model"))
    assert "left this edit to the model" in finish_text(_with(snapshot, "loop"), mode="model")


def test_finish_text__says_when_the_decoder_kept_the_instruction_s_shape():
    snapshot = _done("eos")
    assert "kept the program" not in finish_text(snapshot, mode="model")
    snapshot.metrics["shape_refused"] = 3  # backend/runtime/shape_guard.py
    assert "the decoder kept the program to them (3 of the model's choices refused)" in finish_text(snapshot, mode="model")


def test_finish_text__says_when_the_decoder_kept_copies_moving_forward():
    snapshot = _done("eos")
    assert "already copied" not in finish_text(snapshot, mode="model")
    snapshot.metrics["backward_refused"] = 2  # backend/runtime/copy_order_guard.py
    assert ("the model tried to copy lines it had already copied, and the decoder kept its copies moving forward "
            "(2 of its choices refused)") in finish_text(snapshot, mode="model")
    assert "past the input's last line" not in finish_text(snapshot, mode="model")
    snapshot.metrics["past_end_refused"] = 1
    assert ("the model went on past the input's last line, and the decoder ended its program after one more gen "
            "(1 of its choices refused)") in finish_text(snapshot, mode="model")


def test_finish_text__says_when_the_model_saw_a_window_of_a_long_input():
    snapshot = _done("eos")
    assert "context" not in finish_text(snapshot, mode="model")
    snapshot.metrics["window"] = "lines 120-410 of 900"  # backend/core/window.py
    said = "longer than the model's context, so the model was shown lines 120-410 of 900"
    assert said in finish_text(snapshot, mode="model") and said in finish_text(_with(snapshot, "loop"), mode="model")


def test_a_restart_voids_what_streamed_and_the_second_try_pays_for_the_first():
    tracker = RunTracker("cad", step_seconds=0.1)
    tracker.add(DecodeEvent("copy", "old\n" * 50, 50, 0, 0.0))
    tracker.add(DecodeEvent("gen", "x", 1, 40, 9.0))
    note = "in lines 1-300 of 900 the model's program reached the token limit without finishing the edit, so ..."
    tracker.add(DecodeEvent("restart", note, 0, 0, 0.0))  # backend/runtime/window_retry.py
    running = tracker.snapshot()
    assert running.spans == () and running.output == "" and running.metrics["forwards"] == 0
    assert running.metrics["window_retry"] == note and tracker.event_summary()["tokens"]["copy"] == 0
    tracker.add(DecodeEvent("copy", "a\nb\n", 4, 1, 0.1))
    result = DecodeResult("cad", "model", "a\nb\nc\n", '<copy lines="1-2"/><gen>c\n</gen>', False, "eos", None,
                          _metrics(window_retry=note, retry_seconds=0.3))
    tracker.add(DecodeEvent("done", "", 0, 18, 0.3, result))
    final = tracker.snapshot()
    assert final.spans == (("a\nb\n", "copy"),)
    assert final.metrics["elapsed_seconds"] == pytest.approx(0.6)  # 0.3 s now + the first try's 0.3 s
    assert final.metrics["speedup"] == pytest.approx(1.0)  # 6 tokens x 0.1 s over 0.6 s, not over 0.3 s
    said = finish_text(final, mode="model")
    assert note in said and "the first try's 0.3 s are counted in the time and speed-up" in said


def _with(snapshot: Snapshot, stop: str) -> Snapshot:
    failed = _done(stop)
    failed.metrics.update(snapshot.metrics)
    return failed


def test_finish_text__a_model_run_that_changed_nothing_says_so_and_claims_no_speed_up():
    snapshot = _done("eos")  # its output is "x\n"
    assert is_unchanged(snapshot, "model", "x\n") and not is_unchanged(snapshot, "model", "y\n")
    assert not is_unchanged(snapshot, "reference", "x\n")  # a forced target equal to the input is what was asked
    text = finish_text(snapshot, mode="model", source="x\n")
    assert text.startswith("NO CHANGE: the model's program copies the input unchanged")
    assert "done in" not in finish_text(snapshot, mode="model", source="x\n")
    assert finish_text(snapshot, mode="model", source="y\n").startswith("done in")
    assert format_metrics({"speedup": 9.0}, unchanged=True)["speedup"] == "— (no change)"
    assert not is_unchanged(_done("loop"), "model", "x\n")  # a failure is said as a failure


def _done(stop: str, *, strategy: str = "cad", error: str | None = None) -> Snapshot:
    result = DecodeResult(strategy, "model", "x\n", None, stop != "eos", stop, error, _metrics())
    return Snapshot(strategy, (), "", "x\n", {"elapsed_seconds": 1.0}, (), done=True, result=result,
                    extra={"stop_reason": stop})


# stop reason, mode -> failure?, words in the status
FINISH_TABLE = [
    ("eos", "model", False, "done in 1.00 s decoding"),
    ("loop", "model", True, "FAILED: the model repeated itself"),
    ("max_tokens", "model", True, "FAILED: the model did not finish its program within the max new tokens limit (24)"),
    ("max_tokens", "reference", False, "stopped at the max new tokens limit (24)"),
    ("error", "model", True, "FAILED: the model's program is invalid: bad tag"),
    ("time_limit", "reference", True, "FAILED: the run reached the time limit before the model finished (60 s)"),
    ("cancel", "model", False, "cancelled after"),
]


@pytest.mark.parametrize("stop, mode, failed, words", FINISH_TABLE)
def test_finish_text__stop__mode__failed__words(stop, mode, failed, words):
    snapshot = _done(stop, error="bad tag" if stop == "error" else None)
    assert is_failure(snapshot, mode) is failed
    text = finish_text(snapshot, mode=mode, max_new_tokens=24, run_seconds=60)
    assert words in text and "NOT saved" in text
    if failed:
        assert "what it produced is kept, marked partial" in text
        assert format_metrics({"speedup": 3.0}, failed=True)["speedup"] == "— (failed)"


def test_line_endings_and_adopting_the_inputs():
    assert [line_endings(t) for t in ("a\r\nb\r\n", "a\nb", "a\rb", "a\r\nb\n", "ab")] == [
        "CRLF", "LF", "CR", "mixed", "none"]
    assert adopt_line_endings("a\r\nb\r\n", "a\nc\n") == ("a\r\nc\r\n", "the desired result's LF line endings became CRLF, as in the input")
    assert adopt_line_endings("a\nb\n", "a\nc\n") == ("a\nc\n", None)
    assert adopt_line_endings("a\r\nb\r\n", "a\r\nc\r\n") == ("a\r\nc\r\n", None)


def test_compare_speedup_is_per_output_token_and_says_when_lengths_differ():
    rows = [compare_row("ar", {"elapsed_seconds": 10.0, "output_tokens": 200}, stop="eos", mode="model",
                        produced_target=False, edit_id=1),
            compare_row("cad", {"elapsed_seconds": 2.0, "output_tokens": 157}, stop="eos", mode="model",
                        produced_target=False, edit_id=2)]
    table = compare_table(rows)
    # plain 0.05 s/token, cad 2/157 = 0.01274 s/token: 3.925x (whole-run wall times would say 5.00x)
    assert table[1][8] == "3.92×" and table[0][8] == "1.00×"
    assert "the outputs differ (plain decoding 200, copy-as-decode 157 tokens)" in length_note(rows)
    assert length_note(rows[:1]) == ""
    assert table[1][10] == "(model mode)"
    unchanged = compare_row("cad", {"elapsed_seconds": 1.0, "output_tokens": 157}, stop="eos", mode="model",
                            produced_target=False, edit_id=3, unchanged=True)
    assert compare_table([unchanged])[0][10] == "✗ changed nothing"  # the edit asked for was not made


def test_downloads_share_one_folder_pruned_and_removed_on_close(tmp_path, monkeypatch):
    """Issue 12 item 8: every edit and export left a /tmp/copy-as-decode-* folder forever."""
    import tempfile
    from pathlib import Path

    from app.downloads import DownloadFolder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = DownloadFolder(keep_files=3)
    paths = [Path(folder.write("a\r\nb", "../../etc/out.txt")) for _ in range(5)]
    assert [p.name for p in paths] == ["out.txt"] * 5 and len({p.parent for p in paths}) == 5
    assert paths[-1].read_bytes() == b"a\r\nb" and all(p.is_relative_to(folder.root) for p in paths)
    assert [p.exists() for p in paths] == [False, False, True, True, True]  # only the newest 3 kept
    assert [p.name for p in tmp_path.iterdir()] == [folder.root.name]  # one folder for the whole app
    folder.close()
    assert list(tmp_path.iterdir()) == []


def test_a_killed_servers_download_folder_is_removed_at_the_next_start(tmp_path):
    """Issue 12 item 8's gap: a server killed by SIGKILL cannot run its cleanup, so its folder stayed.
    A real child process makes a download folder and is killed; the next start removes that folder
    and leaves alone a live process's folder and anything that is not ours."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from app.downloads import FOLDER_PREFIX, DownloadFolder

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    code = ("import sys, time; from app.downloads import DownloadFolder; f = DownloadFolder(); "
            "f.write('x', 'out.txt'); print(f.root, flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env,
                             cwd=Path(__file__).resolve().parents[1])
    killed_root = Path(child.stdout.readline().strip())
    assert killed_root.is_dir() and killed_root.name.startswith(f"{FOLDER_PREFIX}{child.pid}-")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert killed_root.is_dir()  # SIGKILL ran no cleanup

    alive = tmp_path / f"{FOLDER_PREFIX}{os.getppid()}-live"  # a running process's folder (our parent)
    alive.mkdir()
    unrelated = tmp_path / "copy-as-decode-loadtest-abc"
    unrelated.mkdir()
    import tempfile
    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        folder = DownloadFolder()
    finally:
        tempfile.tempdir = old
    assert folder.orphans_removed == [killed_root] and not killed_root.exists()
    assert alive.is_dir() and unrelated.is_dir() and folder.root.is_dir()
    folder.close()


def test_plain_estimate_rests_on_the_runs_own_steps_and_says_so():
    """Issue 10 item 5: the estimate used one step timed at model load, so a server started under
    load showed 21x where another showed 1.6x, and an edit that copied nothing showed 3.59x."""
    from app.present import finish_text

    tracker = RunTracker("cad", step_seconds=0.5)  # a load-time step far slower than this run's steps
    tracker.add(DecodeEvent("gen", "c\n", 2, 2, 0.1))
    live = tracker.snapshot().metrics
    assert live["step_seconds"] == 0.5 and "model load" in live["plain_estimate_basis"]
    assert "still going" in live["plain_estimate_basis"]
    # nothing copied: 20 output tokens made in 24 one-token steps of 50 ms (tags cost steps too)
    result = DecodeResult("cad", "model", "x\n" * 10, "<gen>...</gen>", False, "eos", None,
                          _metrics(tokens_copied=0, tokens_generated=20, output_tokens=20, forwards=24,
                                   wall_seconds=1.2, decode_step_seconds=0.05, decode_steps=24))
    tracker.add(DecodeEvent("done", "", 0, 24, 1.2, result))
    final = tracker.snapshot()
    assert final.metrics["step_seconds"] == 0.05
    assert final.metrics["speedup"] == pytest.approx(20 * 0.05 / 1.2)  # below 1x, not the load-time 8.3x
    assert final.metrics["plain_estimate_basis"] == "median of this run's 24 one-token steps (50.0 ms)"
    shown = format_metrics(final.metrics)
    assert shown["plain"] == "1.00 s (this run's steps)" and shown["speedup"] == "0.83×"
    final.extra["edit"] = None
    assert "speed-up is an estimate: plain decoding priced at the median of this run's 24" in finish_text(final, mode="model")

    few = RunTracker("cad", step_seconds=0.5)  # too few own steps for a median: the load-time step, said so
    few.add(DecodeEvent("done", "", 0, 3, 0.2, DecodeResult("cad", "model", "a\n", "", False, "eos", None,
                                                            _metrics(decode_step_seconds=0.05, decode_steps=3))))
    metrics = few.snapshot().metrics
    assert metrics["step_seconds"] == 0.5 and "this run made 3 one-token steps" in metrics["plain_estimate_basis"]
    assert format_metrics(metrics)["plain"].endswith("(step at load)")
