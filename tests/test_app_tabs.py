"""The app's tabs against the real service: tiny-random model, a real SQLite file, no browser.

Moved from tests/test_app_handlers.py when app/handlers.py became one module per tab (app/tabs/):
every assertion kept, read through the components instead of string keys. Changed on purpose:
the model-mode test asserts the real outcome (it accepted stop_reason "error" as success), the A/B
test asserts the comparison is blind (it asserted the strategy name was shown), and deleting a
session now asks first (the handler deleted at once).

tiny-random (2 layers, hidden 64, random weights, the real SmolLM2 tokenizer) writes garbage but
valid programs in model mode; reference mode replays the oracle program of a given target, so its
output must be that target byte for byte.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.present import exact_source, unified_diff
from app.service import AppConfig, AppService, InputError, RunRequest
from app.ui import build_app
from backend.runtime.request import APP_LIMITS

MODEL = "tiny-random"
BODY = (
    '    """Say hello to someone by name, politely, and return the greeting."""\r\n'
    "    message = 'hello, ' + name + '! nice to meet you, ' + name.upper() + '.'\r\n"
    "    print(message, flush=True)\r\n"
    "    return message\r\n\r\n\r\n"
)
SOURCE = "def greet(name):\r\n" + BODY + "greet('bob')"  # CRLF, no final newline
TARGET = "def welcome(name):\r\n" + BODY + "welcome('bob')"
LIMITS = replace(APP_LIMITS, max_source_chars=2_000, max_target_chars=2_000, max_source_lines=60,
                 max_new_tokens=400, default_new_tokens=64)


def browser(key: str) -> SimpleNamespace:
    return SimpleNamespace(session_hash=key)  # what Gradio's gr.Request offers the callbacks


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("app")
    config = AppConfig(model=MODEL, db_url=str(folder / "handlers.sqlite3"), include_random=True,
                       update_interval_s=0.02, limits=LIMITS)
    app_service = AppService(config)
    status = app_service.wait_until_ready(MODEL, timeout=300)
    assert status.ready, status.text
    yield app_service
    app_service.close()


@pytest.fixture(scope="module")
def ui(service):
    app = build_app(service)
    app.annotate.rng = random.Random(7)
    return app


def merge(updates):
    merged: dict = {}
    items = list(updates)
    for update in items:
        merged.update(update)
    return merged, items


def stored_row(service: AppService, edit_id: int) -> dict:
    connection = sqlite3.connect(service.storage.location)
    connection.row_factory = sqlite3.Row
    row = connection.execute("select * from edits where id = ?", (edit_id,)).fetchone()
    connection.close()
    return dict(row)


def edit_id_in(status: str) -> int:
    return int(status.split("saved as edit #", 1)[1].split()[0])


def run_edit(ui, source, instruction, mode, target, tokens, key, **extra):
    e = ui.edit
    return e.run(MODEL, source, instruction, mode, target, tokens, request=browser(key), **extra)


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


def test_upload__crlf_kept__non_utf8_and_binary_rejected(ui, tmp_path):
    e = ui.edit
    good = tmp_path / "crlf.py"
    good.write_bytes(SOURCE.encode("utf-8"))
    update = e.on_upload(str(good))
    assert update[e.source] == SOURCE and update[e.uploaded] == SOURCE
    assert "CRLF line endings" in update[e.status] and "no newline at the end" in update[e.status]
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    rejected = e.on_upload(str(latin))
    assert "latin1.txt is not UTF-8 text: byte 0xe9 at offset 3" in rejected[e.status]
    assert rejected[e.uploaded] is None and e.source not in rejected
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"ab\x00cd")
    assert "looks binary" in e.on_upload(str(binary))[e.status]
    big = tmp_path / "big.txt"
    big.write_text("x\n" * 100)
    assert "100 lines; the limit is 60" in e.on_upload(str(big))[e.status]


def test_run_edit_refuses_bad_input_with_a_message(ui):
    merged, items = merge(run_edit(ui, "", "x", "model", None, 10, "bad"))
    assert len(items) == 1 and "the input is empty" in merged[ui.edit.status]


# -- runs on the real model -----------------------------------------------------------------------


def test_reference_edit_streams_spans_stores_and_downloads_exact_bytes(ui, service):
    e = ui.edit
    merged, items = merge(run_edit(ui, SOURCE.replace("\r\n", "\n"), "Rename greet to welcome.", "reference",
                                   TARGET, 200, "ref", uploaded=SOURCE, upload_name="greet.py"))
    assert len(items) >= 2
    kinds = {kind for _text, kind in merged[e.stream]}
    assert {"copy", "gen", "tag"} <= kinds
    assert "".join(text for text, kind in merged[e.stream] if kind != "tag") == TARGET
    assert merged[e.output] == TARGET
    assert merged[e.program].startswith(("<copy", "<gen>"))
    assert "-def greet(name):" in merged[e.diff] and "+welcome('bob')" in merged[e.diff]
    assert merged[e.metrics["copied"]] not in ("0", "—") and merged[e.metrics["forwards"]] not in ("0", "—")
    assert merged[e.metrics["speedup"]].endswith("×")
    assert merged[e.chart] is not None
    assert Path(merged[e.download]).read_bytes() == TARGET.encode("utf-8")
    assert Path(merged[e.download]).name == "greet.py"
    assert "done in" in merged[e.status] and "saved as edit #" in merged[e.status]
    row = stored_row(service, edit_id_in(merged[e.status]))
    assert row["input"] == SOURCE and row["output"] == TARGET and row["target"] == TARGET
    assert row["strategy"] == "cad" and row["mode"] == "reference" and row["partial"] == 0
    assert json.loads(row["metrics"])["tokens_copied"] > 0
    assert json.loads(row["events"])["spans"][0][0] in ("tag", "copy", "gen")


def test_model_mode_edit_reports_its_real_outcome(ui, service):
    """Was: stop_reason in (eos, max_tokens, complete, error) passed, so a decoder that always failed
    passed. Now: tiny-random must end its program (eos) or hit the limit, and say which plainly."""
    e = ui.edit
    merged, _items = merge(run_edit(ui, "x = 1\ny = 2\n", "Set y to 3.", "model", None, 24, "model"))
    assert "saved as edit #" in merged[e.status], merged[e.status]
    row = stored_row(service, edit_id_in(merged[e.status]))
    assert row["mode"] == "model" and row["stop_reason"] in ("eos", "max_tokens"), (row["stop_reason"], row["error"])
    if row["stop_reason"] == "max_tokens":  # an unfinished program is a failure, in plain words
        assert row["partial"] == 1 and "max new tokens limit (24)" in merged[e.status]
        assert merged[e.status].startswith("FAILED: the model did not finish its program")
        assert merged[e.metrics["speedup"]] == "— (failed)"
    elif row["output"] == row["input"]:  # a finished program that changed nothing is said plainly
        assert row["partial"] == 0 and merged[e.status].startswith("NO CHANGE: the model's program copies the input")
        assert merged[e.metrics["speedup"]] == "— (no change)"
    else:
        assert row["partial"] == 0 and row["error"] is None and merged[e.status].startswith("done in")


def test_cancel_keeps_a_partial_result_marked_partial(ui, service):
    e = ui.edit
    runs = run_edit(ui, "x = 1\n" * 20, "Rewrite all.", "model", None, 400, "cancel")
    first = next(runs)
    while e.stream not in first:  # past the "waiting for the model" lines, if any
        first = next(runs)
    assert first[e.status].startswith("running")
    assert e.cancel(request=browser("cancel"))[e.status].startswith("cancelling")
    merged, _items = merge(runs)
    assert "cancelled" in merged[e.status] and "(marked partial)" in merged[e.status], merged[e.status]
    row = stored_row(service, edit_id_in(merged[e.status]))
    assert row["partial"] == 1 and row["stop_reason"] == "cancel"
    assert e.cancel(request=browser("cancel")) == {}  # nothing left to cancel


def test_compare_reference_runs_all_four_and_checks_the_target(ui, service):
    """Plain decoding, prompt lookup at transformers' defaults and at the tuned setting (issue 10:
    the peer at its best), copy-as-decode; each run stored with what it was."""
    c = ui.compare
    merged, items = merge(c.run(MODEL, SOURCE.replace("\r\n", "\n"), "Rename greet to welcome.", "reference", TARGET,
                                200, SOURCE, request=browser("compare")))
    table = merged[c.table]
    assert [row[0] for row in table] == ["plain decoding", "prompt lookup 2-gram/10", "prompt lookup 3-gram/64",
                                         "copy-as-decode"]
    assert [row[10] for row in table] == ["✓ yes"] * 4, table
    assert all(row[2] > 0 for row in table)  # forwards
    assert table[2][2] < table[1][2]  # 64 drafts per forward need fewer forwards than 10 on this copy-heavy edit
    assert "compared 4 runs" in merged[c.status]
    assert "produced the target: ar, pld, pld-tuned, cad of 4" in merged[c.status]
    assert merged[c.chart] is not None
    assert all(merged[c.timers[s]].startswith("done") for s in ("ar", "pld", "pld-tuned", "cad"))
    # the panes streamed: each strategy's pane got intermediate updates before the table
    assert sum(1 for update in items if c.streams["ar"] in update) >= 2
    session_id = int(merged[c.status].split("session #", 1)[1].split()[0])
    edits = service.storage.session_edits(session_id)
    assert [e.strategy for e in edits] == ["ar", "pld", "pld", "cad"] and all(e.output == TARGET for e in edits)
    assert [e.metrics.get("lookup") for e in edits] == [None, "2-gram/10", "3-gram/64", None]
    assert all(e.input == SOURCE for e in edits)  # the uploaded CRLF text, not the textarea's LF copy


def test_model_status_polling_stops_once_ready(ui, service):
    top = SimpleNamespace(service=service)
    from app.ui import _TopBar

    polled = _TopBar.poll(SimpleNamespace(service=service, status=ui.model_status, timer=ui.timer), MODEL)
    assert polled[ui.model_status].startswith(f"ready: {MODEL} on torch, cpu")
    assert polled[ui.timer].active is False
    assert top.service is service
    c = ui.compare
    copied = c.copy_from_edit(SOURCE.replace("\r\n", "\n"), SOURCE, "x", "reference", TARGET)
    assert copied[c.source] == SOURCE == copied[c.uploaded]


# -- annotation and history -----------------------------------------------------------------------


def test_annotate_queue_save_skip_export_kappa(ui, service):
    a = ui.annotate
    imported = a.import_corpus("alice", "humanevalpack-python", 3)
    assert "imported 3 cases of humanevalpack-python" in imported[a.status]
    again = a.import_corpus("alice", "humanevalpack-python", 3)
    assert "all 3 cases of humanevalpack-python were already imported" in again[a.status]
    view = a.load_queue("alice")
    queue = view[a.queue]
    assert len(queue["ids"]) >= 3 and view[a.progress].startswith("item 1 of")
    first_id = queue["ids"][0]
    assert view[a.info].startswith(f"edit #{first_id}")
    assert a.save("alice", queue, None, "none", "none", "")[a.status].startswith("choose a label")
    after = a.save("alice", queue, "partly_correct", "generated_content", "none", "close")
    assert after[a.status].startswith(f"saved: edit #{first_id} = partly_correct by alice")
    assert after[a.queue]["pos"] == 1 and "1 saved this round" in after[a.progress]
    skipped = a.skip(after[a.queue])
    assert skipped[a.queue]["pos"] == 2 and skipped[a.status].startswith("skipped edit #")
    stored = service.storage.annotations(annotator="alice")
    assert [(x.edit_id, x.label, x.error_kind, x.note) for x in stored] == [
        (first_id, "partly_correct", "generated_content", "close")
    ]
    # a second annotator on the same edit: agreement is computable
    bob = {"ids": [first_id], "pos": 0, "saved": 0, "annotator": "bob"}
    a.save("bob", bob, "wrong", "none", "none", "")
    assert "1 shared edits" in a.kappa("alice", "bob")[a.kappa_result]
    assert "different" in a.kappa("bob", "bob")[a.kappa_result]
    jsonl = a.export("jsonl")
    lines = Path(jsonl[a.export_file]).read_text(encoding="utf-8").splitlines()
    assert {json.loads(line)["annotator"] for line in lines} >= {"alice", "bob"}
    csv_text = Path(a.export("csv")[a.export_file]).read_text(encoding="utf-8")
    assert csv_text.startswith("annotation_id,edit_id,annotator,label")


def test_ab_preference_is_blind_and_stores_the_sides(ui, service):
    """Was: B was labelled with its strategy ("plain decoding") before saving. Now the sides are
    random, names appear only after saving, and the stored preference follows the side picked."""
    a = ui.annotate
    compare = next(s for s in service.storage.list_sessions() if s.kind == "compare")
    edits = {e.strategy: e for e in service.storage.session_edits(compare.id)}
    cad, ar = edits["cad"], edits["ar"]
    lefts = set()
    for _ in range(12):
        shown = a.show({"ids": [cad.id], "pos": 0, "saved": 0, "annotator": "carol"})
        assert shown[a.ab_row]["visible"] is True
        assert "strategy hidden" in shown[a.info] and "copy-as-decode" not in shown[a.info]
        assert shown[a.output] == [(cad.output, None)]  # no copy/gen colours: they would reveal the strategy
        lefts.add(shown[a.queue]["left"])
    assert lefts == {cad.id, ar.id}  # both sides occur
    queue = shown[a.queue]
    picked = "left" if queue["left"] == ar.id else "right"  # the annotator prefers plain decoding's output
    saved = a.save("carol", queue, "correct", "none", picked, "")
    assert "plain decoding" in saved[a.status] and "copy-as-decode" in saved[a.status]  # revealed after saving
    (annotation,) = service.storage.annotations(annotator="carol")
    assert annotation.preference == "B" and annotation.other_edit_id == ar.id
    assert annotation.shown_first_edit_id == queue["left"]


def test_history_lists_reopens_exports_and_deletes_after_confirming(ui, service):
    h, e, c = ui.history, ui.edit, ui.compare
    listing = h.listing()
    assert listing[h.table] and "sessions in" in listing[h.status]
    assert service.storage.location not in listing[h.status]  # no server path on the page
    edit_session = next(s for s in service.storage.list_sessions() if s.kind == "edit" and s.mode == "reference")
    reopened = h.reopen(edit_session.id)
    assert reopened[e.source] == SOURCE and reopened[e.output] == TARGET
    assert {kind for _t, kind in reopened[e.stream]} >= {"copy", "gen"}
    compare = next(s for s in service.storage.list_sessions() if s.kind == "compare")
    again = h.reopen(compare.id)
    assert [row[10] for row in again[c.table]] == ["✓ yes"] * 4
    assert again[c.timers["pld-tuned"]].startswith("stored:") and again[c.table][2][0] == "prompt lookup 3-gram/64"
    exported = h.export(edit_session.id, everything=False)
    assert json.loads(Path(exported[h.export_file]).read_text(encoding="utf-8"))["session_id"] == edit_session.id
    asked = h.ask_delete(edit_session.id)
    assert asked[h.confirm_group]["visible"] is True and "no human labels" in asked[h.confirm_text]
    assert service.storage.get_session(edit_session.id) is not None  # asking deletes nothing
    deleted = h.delete(edit_session.id, False)
    assert deleted[h.status] == f"deleted session #{edit_session.id}"
    assert service.storage.get_session(edit_session.id) is None
    assert "has no stored edits" in h.reopen(edit_session.id)[h.status]


def test_reopening_a_model_edit_that_changed_nothing_says_so(ui, service):
    from backend.storage import NewEdit

    h, e = ui.history, ui.edit
    session = service.storage.create_session(kind="edit", model="tiny-random", mode="model", input_text="x = 1\n")
    service.storage.add_edit(session.id, NewEdit(
        input="x = 1\n", instruction="Set x to 2.", output="x = 1\n", strategy="cad", model="tiny-random",
        mode="model", program='<copy lines="1-1"/>', stop_reason="eos", metrics={"speedup": 4.0}))
    reopened = h.reopen(session.id)
    assert "NO CHANGE: the output equals the input" in reopened[e.status]
    assert reopened[e.metrics["speedup"]] == "— (no change)"


def test_deleting_a_labelled_session_keeps_its_labels_unless_asked(ui, service):
    h = ui.history
    labelled = next(s for s in service.storage.list_sessions() if s.kind == "corpus")
    corpus_edit = service.storage.session_edits(labelled.id)[0]
    service.storage.save_annotation(edit_id=corpus_edit.id, annotator="dave", label="wrong")
    count = len(service.storage.annotations())
    asked = h.ask_delete(labelled.id)
    assert "human label(s)" in asked[h.confirm_text] and "KEPT" in asked[h.confirm_text]
    kept = h.delete(labelled.id, False)
    assert "kept " in kept[h.status] and "labelled edit(s)" in kept[h.status]
    assert len(service.storage.annotations()) == count
    assert service.storage.get_edit(corpus_edit.id) is not None


def test_concurrent_users_both_saved(ui, service):
    """Two browser sessions editing at once: runs queue for the model, both rows are stored."""
    results: dict[str, dict] = {}

    def user(key: str) -> None:
        results[key], _ = merge(run_edit(ui, "a\nb\n", "x", "reference", "a\nc\n", 50, key))

    threads = [threading.Thread(target=user, args=(k,)) for k in ("u1", "u2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    ids = {edit_id_in(results[k][ui.edit.status]) for k in ("u1", "u2")}
    assert len(ids) == 2 and all(service.storage.get_edit(i).output == "a\nc\n" for i in ids)


def test_a_typed_desired_result_takes_the_inputs_crlf_and_says_so(ui, service):
    """Issue 12 item 10: the textarea turns the target's CRLF into LF; the oracle then copied nothing."""
    e = ui.edit
    typed_target = TARGET.replace("\r\n", "\n")
    merged, _ = merge(run_edit(ui, SOURCE.replace("\r\n", "\n"), "Rename greet to welcome.", "reference",
                               typed_target, 200, "crlf", uploaded=SOURCE))
    assert merged[e.output] == TARGET  # CRLF kept, and the copies were real
    assert "LF line endings became CRLF, as in the input" in merged[e.status]
    row = stored_row(service, edit_id_in(merged[e.status]))
    assert row["target"] == TARGET and json.loads(row["metrics"])["tokens_copied"] > 0


def test_the_desired_result_can_be_uploaded_byte_exact(ui, tmp_path):
    e = ui.edit
    upload = tmp_path / "target.py"
    upload.write_bytes(TARGET.encode("utf-8"))
    shown = e.on_target_upload(str(upload))
    assert shown[e.target_uploaded] == TARGET and "CRLF line endings (kept exactly)" in shown[e.status]
    request, note = e.request_from(MODEL, SOURCE, "x", "reference", TARGET.replace("\r\n", "\n"), 64, SOURCE, TARGET)
    assert request.target == TARGET and note is None


def test_history_pages_and_searches(ui, service):
    h = ui.history
    created = [service.storage.create_session(kind="edit", model=MODEL, mode="model", title=f"paging probe {i}")
               for i in range(55)]
    first = h.listing()
    assert "page 1 of" in first[h.status] and len(first[h.table]) == 50
    older = h.listing(first[h.view], +1)
    assert "page 2 of" in older[h.status] and older[h.table][0][0] < first[h.table][-1][0]
    assert older[h.table][0][3].startswith(("paging probe", "Rename", "Set", "Rewrite", "x", "humaneval"))
    found = h.find("paging probe 54")
    assert found[h.table][0][3] == "paging probe 54" and "matching 'paging probe 54'" in found[h.status]
    first_id = created[0].id  # an earlier test in this module may have deleted session #1
    assert h.find(f"#{first_id}")[h.table][0][0] == first_id
