"""The app's handlers against the real service: tiny-random model, a real SQLite file, no browser.

tiny-random (2 layers, hidden 64, random weights, the real SmolLM2 tokenizer) writes garbage but
valid programs in model mode; reference mode replays the oracle program of a given target, so its
output must be that target byte for byte.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from app import charts
from app.handlers import Handlers, exact_source, format_metrics, unified_diff
from app.progress import RunTracker
from app.service import AppConfig, AppService, InputError, Limits, RunRequest
from backend.runtime.events import DecodeEvent, DecodeMetrics, DecodeResult

MODEL = "tiny-random"
BODY = (
    '    """Say hello to someone by name, politely, and return the greeting."""\r\n'
    "    message = 'hello, ' + name + '! nice to meet you, ' + name.upper() + '.'\r\n"
    "    print(message, flush=True)\r\n"
    "    return message\r\n\r\n\r\n"
)
SOURCE = "def greet(name):\r\n" + BODY + "greet('bob')"  # CRLF, no final newline
TARGET = "def welcome(name):\r\n" + BODY + "welcome('bob')"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("app")
    config = AppConfig(
        model=MODEL, db_url=str(folder / "handlers.sqlite3"), include_random=True, update_interval_s=0.02,
        limits=Limits(max_input_chars=2_000, max_input_lines=60, max_new_tokens=400, default_new_tokens=64),
    )
    app_service = AppService(config)
    status = app_service.wait_until_ready(MODEL, timeout=300)
    assert status.ready, status.text
    yield app_service
    app_service.close()


@pytest.fixture(scope="module")
def handlers(service):
    return Handlers(service)


def _last(updates):
    merged: dict = {}
    items = list(updates)
    for update in items:
        merged.update(update)
    return merged, items


def _stored(service: AppService, edit_id: int) -> dict:
    connection = sqlite3.connect(service.storage.location)
    connection.row_factory = sqlite3.Row
    row = connection.execute("select * from edits where id = ?", (edit_id,)).fetchone()
    connection.close()
    return dict(row)


def _edit_id(status: str) -> int:
    return int(status.split("saved as edit #", 1)[1].split()[0])


# -- pure helpers ---------------------------------------------------------------------------------


def test_exact_source_keeps_uploaded_crlf_when_textbox_shows_it():
    assert exact_source(SOURCE.replace("\r\n", "\n"), SOURCE) == SOURCE
    assert exact_source("edited by hand", SOURCE) == "edited by hand"
    assert exact_source("typed", None) == "typed"


def test_unified_diff_marks_missing_final_newline():
    diff = unified_diff("a\nb", "a\nc")
    assert diff.startswith("--- input\n+++ output\n")
    assert "-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n" in diff
    assert unified_diff("same\n", "same\n") == "(no changes)"


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
                          DecodeMetrics(tokens_copied=4, tokens_generated=2, tokens_tag=15, forwards=18,
                                        wall_seconds=0.3, prefill_seconds=0.05, tokens_per_second=20.0,
                                        jump_forward_tokens=0, boundary_retokenized=0, accepted_draft_tokens=0,
                                        output_tokens=6, prompt_tokens=40))
    tracker.add(DecodeEvent("done", "", 0, 18, 0.3, result))
    final = tracker.snapshot()
    assert final.done and final.metrics["speedup"] == pytest.approx(2.0)
    assert final.program == result.program
    summary = tracker.event_summary()
    assert summary["tokens"] == {"copy": 4, "gen": 2, "tag": 15} and summary["events"]["gen"] == 2
    assert summary["spans"][1] == ["copy", "a\nb\n"]
    shown = format_metrics(final.metrics)
    assert shown["m_speedup"] == "2.00×" and shown["m_elapsed"] == "0.30 s"


def test_charts_are_plain_plotly_figures():
    figure = charts.tokens_over_time([(0.0, 0), (0.5, 10)], step_seconds=0.1)
    assert [trace.name for trace in figure.data][0] == "copy-as-decode"
    assert list(figure.data[1].x) == [0.0, pytest.approx(1.0)]
    bars = charts.comparison([{"strategy": "ar", "wall_seconds": 2.0, "forwards": 40, "tokens_per_second": 20.0},
                              {"strategy": "cad", "wall_seconds": 0.5, "forwards": 9, "tokens_per_second": 80.0}])
    assert len(bars.data) == 3 and list(bars.data[1].y) == [40.0, 9.0]


# -- input checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, message", [
    (dict(source=""), "the input is empty"),
    (dict(source="x" * 2_001), "2,001 characters; the limit is 2,000"),
    (dict(source="x\n" * 61), "61 lines; the limit is 60"),
    (dict(instruction=" "), "write an instruction"),
    (dict(mode="reference", target=None), "needs the desired result"),
    (dict(max_new_tokens=401), "between 1 and 400"),
    (dict(max_new_tokens=0), "between 1 and 400"),
    (dict(strategy="beam"), "unknown strategy"),
])
def test_check_request__overrides__message(service, overrides, message):
    request = RunRequest(**{**dict(model=MODEL, source="a\n", instruction="do it"), **overrides})
    with pytest.raises(InputError, match=message):
        service.check_request(request)


def test_upload__crlf_kept__non_utf8_and_binary_rejected(handlers, tmp_path):
    good = tmp_path / "crlf.py"
    good.write_bytes(SOURCE.encode("utf-8"))
    update = handlers.upload(str(good))
    assert update["source"] == SOURCE and update["uploaded"] == SOURCE
    assert "CRLF line endings" in update["status"] and "no newline at the end" in update["status"]
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    rejected = handlers.upload(str(latin))
    assert "latin1.txt is not UTF-8 text: byte 0xe9 at offset 3" in rejected["status"]
    assert rejected["uploaded"] is None and "source" not in rejected
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"ab\x00cd")
    assert "looks binary" in handlers.upload(str(binary))["status"]
    big = tmp_path / "big.txt"
    big.write_text("x\n" * 100)
    assert "100 lines; the limit is 60" in handlers.upload(str(big))["status"]


def test_run_edit_refuses_bad_input_with_a_message(handlers):
    merged, items = _last(handlers.run_edit(MODEL, "", None, None, "x", "model", None, 10, session_key="bad"))
    assert len(items) == 1 and "the input is empty" in merged["status"]


# -- runs on the real model -----------------------------------------------------------------------


def test_reference_edit_streams_spans_stores_and_downloads_exact_bytes(handlers, service):
    textbox = SOURCE.replace("\r\n", "\n")  # what a browser textarea sends back
    merged, items = _last(handlers.run_edit(
        MODEL, textbox, SOURCE, "greet.py", "Rename greet to welcome.", "reference", TARGET, 200,
        session_key="ref",
    ))
    assert len(items) >= 2
    kinds = {kind for _text, kind in merged["stream"]}
    assert {"copy", "gen", "tag"} <= kinds
    assert "".join(text for text, kind in merged["stream"] if kind != "tag") == TARGET
    assert merged["output"] == TARGET
    assert merged["program"].startswith(("<copy", "<gen>"))
    assert "-def greet(name):" in merged["diff"] and "+welcome('bob')" in merged["diff"]
    assert merged["m_copied"] not in ("0", "—") and merged["m_forwards"] not in ("0", "—")
    assert merged["m_speedup"].endswith("×")
    assert merged["chart"] is not None
    assert Path(merged["download"]).read_bytes() == TARGET.encode("utf-8")
    assert Path(merged["download"]).name == "greet.py"
    assert "done in" in merged["status"] and "saved as edit #" in merged["status"]
    row = _stored(service, _edit_id(merged["status"]))
    assert row["input"] == SOURCE and row["output"] == TARGET and row["target"] == TARGET
    assert row["strategy"] == "cad" and row["mode"] == "reference" and row["partial"] == 0
    assert json.loads(row["metrics"])["tokens_copied"] > 0
    assert json.loads(row["events"])["spans"][0][0] in ("tag", "copy", "gen")


def test_model_mode_edit_completes_or_stops_at_the_limit(handlers, service):
    merged, _items = _last(handlers.run_edit(
        MODEL, "x = 1\ny = 2\n", None, None, "Set y to 3.", "model", None, 24, session_key="model",
    ))
    assert "saved as edit #" in merged["status"], merged["status"]
    row = _stored(service, _edit_id(merged["status"]))
    assert row["mode"] == "model" and row["stop_reason"] in ("eos", "max_tokens", "complete", "error")
    if row["stop_reason"] == "max_tokens":
        assert row["partial"] == 1 and "max new tokens limit (24)" in merged["status"]


def test_cancel_keeps_a_partial_result_marked_partial(handlers, service):
    runs = handlers.run_edit(MODEL, "x = 1\n" * 20, None, None, "Rewrite all.", "model", None, 400, session_key="cancel")
    first = next(runs)
    assert first["status"].startswith("running")
    assert handlers.cancel(session_key="cancel")["status"].startswith("cancelling")
    merged, _items = _last(runs)
    assert "cancelled" in merged["status"] and "(marked partial)" in merged["status"], merged["status"]
    row = _stored(service, _edit_id(merged["status"]))
    assert row["partial"] == 1 and row["stop_reason"] == "cancel"
    assert handlers.cancel(session_key="cancel") == {}  # nothing left to cancel


def test_compare_reference_runs_all_three_and_checks_the_target(handlers, service):
    merged, items = _last(handlers.run_compare(
        MODEL, SOURCE.replace("\r\n", "\n"), SOURCE, "Rename greet to welcome.", "reference", TARGET, 200,
        session_key="compare",
    ))
    table = merged["c_table"]
    assert [row[0] for row in table] == ["plain decoding", "prompt lookup", "copy-as-decode"]
    assert [row[10] for row in table] == ["✓ yes"] * 3, table
    assert all(row[2] > 0 for row in table)  # forwards
    assert "produced the target: ar, pld, cad of 3" in merged["c_status"]
    assert merged["c_chart"] is not None
    assert all(merged[f"{s}_timer"].startswith("done") for s in ("ar", "pld", "cad"))
    # the panes streamed: each strategy's pane got intermediate updates before the table
    assert sum(1 for update in items if "ar_stream" in update) >= 2
    session_id = int(merged["c_status"].split("session #", 1)[1].split()[0])
    edits = service.storage.session_edits(session_id)
    assert [e.strategy for e in edits] == ["ar", "pld", "cad"] and all(e.output == TARGET for e in edits)
    assert all(e.input == SOURCE for e in edits)  # the uploaded CRLF text, not the textarea's LF copy


def test_model_status_polling_stops_once_ready(handlers):
    polled = handlers.poll_model(MODEL)
    assert polled["model_status"].startswith(f"ready: {MODEL} on cpu")
    assert polled["timer"].active is False
    copied = handlers.copy_from_edit(SOURCE.replace("\r\n", "\n"), SOURCE, "x", "reference", TARGET)
    assert copied["c_source"] == SOURCE == copied["c_uploaded"]


# -- annotation and history -----------------------------------------------------------------------


def test_annotate_queue_save_skip_export_kappa(handlers, service):
    imported = handlers.import_corpus("alice", "humanevalpack-python", 3)
    assert "imported 3 cases of humanevalpack-python" in imported["a_status"]
    view = handlers.load_queue("alice")
    queue = view["queue"]
    assert len(queue["ids"]) >= 3 and view["a_progress"].startswith("item 1 of")
    first_id = queue["ids"][0]
    assert view["a_info"].startswith(f"edit #{first_id}")
    assert handlers.save_annotation("alice", queue, None, "none", "none", "")["a_status"].startswith("choose a label")
    after = handlers.save_annotation("alice", queue, "partly_correct", "generated_content", "none", "close")
    assert after["a_status"] == f"saved: edit #{first_id} = partly_correct by alice"
    assert after["queue"]["pos"] == 1 and "1 saved this round" in after["a_progress"]
    skipped = handlers.skip(after["queue"])
    assert skipped["queue"]["pos"] == 2 and skipped["a_status"].startswith("skipped edit #")
    stored = service.storage.annotations(annotator="alice")
    assert [(a.edit_id, a.label, a.error_kind, a.note) for a in stored] == [
        (first_id, "partly_correct", "generated_content", "close")
    ]
    # a second annotator on the same edit: agreement is computable
    bob = handlers.load_queue("bob")
    handlers.save_annotation("bob", bob["queue"], "wrong", "none", "none", "")
    assert "1 shared edits" in handlers.kappa("alice", "bob")["k_result"]
    assert "different" in handlers.kappa("bob", "bob")["k_result"]
    jsonl = handlers.export_annotations("jsonl")
    lines = Path(jsonl["a_export"]).read_text(encoding="utf-8").splitlines()
    assert {json.loads(line)["annotator"] for line in lines} >= {"alice", "bob"}
    csv_text = Path(handlers.export_annotations("csv")["a_export"]).read_text(encoding="utf-8")
    assert csv_text.startswith("annotation_id,edit_id,annotator,label")


def test_ab_preference_against_the_other_strategy_of_a_comparison(handlers, service):
    session = service.storage.list_sessions()
    compare = next(s for s in session if s.kind == "compare")
    cad = next(e for e in service.storage.session_edits(compare.id) if e.strategy == "cad")
    queue = {"ids": [cad.id], "pos": 0, "saved": 0, "annotator": "carol"}
    shown = handlers._show(queue)
    assert shown["a_b_output"]["visible"] is True and "plain decoding" in shown["a_b_output"]["label"]
    handlers.save_annotation("carol", queue, "correct", "none", "A", "")
    (annotation,) = service.storage.annotations(annotator="carol")
    ar = next(e for e in service.storage.session_edits(compare.id) if e.strategy == "ar")
    assert annotation.preference == "A" and annotation.other_edit_id == ar.id


def test_history_lists_reopens_exports_and_deletes(handlers, service):
    listing = handlers.history()
    assert listing["h_table"] and "sessions in" in listing["h_status"]
    edit_session = next(s for s in service.storage.list_sessions() if s.kind == "edit" and s.mode == "reference")
    reopened = handlers.reopen(edit_session.id)
    assert reopened["source"] == SOURCE and reopened["output"] == TARGET
    assert {kind for _t, kind in reopened["stream"]} >= {"copy", "gen"}
    compare = next(s for s in service.storage.list_sessions() if s.kind == "compare")
    again = handlers.reopen(compare.id)
    assert [row[10] for row in again["c_table"]] == ["✓ yes"] * 3
    exported = handlers.export_sessions(edit_session.id, everything=False)
    assert json.loads(Path(exported["h_export"]).read_text(encoding="utf-8"))["session_id"] == edit_session.id
    deleted = handlers.delete_session(edit_session.id)
    assert deleted["h_status"] == f"deleted session #{edit_session.id}"
    assert service.storage.get_session(edit_session.id) is None
    assert "has no stored edits" in handlers.reopen(edit_session.id)["h_status"]


def test_concurrent_users_both_saved(handlers, service):
    """Two browser sessions editing at once: runs queue on the model lock, both rows are stored."""
    results: dict[str, dict] = {}

    def user(key: str) -> None:
        results[key], _ = _last(handlers.run_edit(MODEL, "a\nb\n", None, None, "x", "reference", "a\nc\n", 50,
                                                  session_key=key))

    threads = [threading.Thread(target=user, args=(k,)) for k in ("u1", "u2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    ids = {_edit_id(results[k]["status"]) for k in ("u1", "u2")}
    assert len(ids) == 2 and all(service.storage.get_edit(i).output == "a\nc\n" for i in ids)
