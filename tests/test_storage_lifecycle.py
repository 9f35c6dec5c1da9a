"""Storage items of issue 12 on a real SQLite file: runs stored from their start (a crash leaves an
"interrupted" edit), paging and search, delete with a preview that keeps labels, idempotent corpus
import, blind A/B mapping, and an older database file gaining the new column."""

from __future__ import annotations

import sqlite3

import pytest

from backend.storage import INTERRUPTED, RUNNING, NewEdit, Storage, StorageError


def _edit(**overrides) -> NewEdit:
    fields = dict(input="a\nb\n", instruction="b to c", output="", strategy="cad", model="m", mode="model")
    fields.update(overrides)
    return NewEdit(**fields)


@pytest.fixture
def store(tmp_path):
    storage = Storage(str(tmp_path / "life.sqlite3"))
    yield storage
    storage.close()


def test_run_stored_at_start__checkpointed__finished_in_place(store):
    session = store.create_session(kind="edit", model="m", mode="model")
    started = store.start_edit(session.id, _edit())
    assert started.stop_reason == RUNNING and started.partial
    assert store.checkpoint_edit(started.id, output="a\n", program='<copy lines="1-1"/>') is True
    assert store.get_edit(started.id).output == "a\n"
    done = store.finish_edit(started.id, _edit(output="a\nc\n", stop_reason="eos"))
    assert (done.id, done.output, done.partial, done.stop_reason) == (started.id, "a\nc\n", False, "eos")
    assert store.count_edits() == 1  # one row per run, never a second
    assert store.checkpoint_edit(started.id, output="late", program=None) is False  # finished rows stay put
    assert store.get_edit(started.id).output == "a\nc\n"


def test_a_crash_leaves_an_interrupted_edit_with_what_was_produced(tmp_path):
    path = tmp_path / "crash.sqlite3"
    first = Storage(str(path))
    session = first.create_session(kind="edit", model="m", mode="model")
    running = first.start_edit(session.id, _edit())
    first.checkpoint_edit(running.id, output="a\n", program='<copy lines="1-1"/>')
    finished = first.add_edit(session.id, _edit(output="x", stop_reason="eos"))
    first.close()  # the process "dies" here: nobody finishes the run
    second = Storage(str(path))
    assert second.mark_interrupted() == 1
    edit = second.get_edit(running.id)
    assert (edit.stop_reason, edit.partial, edit.output) == (INTERRUPTED, True, "a\n")
    assert "server stopped" in edit.error
    assert second.get_edit(finished.id).stop_reason == "eos"
    assert second.mark_interrupted() == 0
    second.close()


def test_history_pages_counts_and_searches_past_200(store):
    for i in range(216):
        store.create_session(kind="edit", model="m", mode="model", title=f"task {i}" + (" rename" if i % 50 == 0 else ""))
    assert store.count_sessions() == 216
    pages = [store.list_sessions(limit=100, offset=o) for o in (0, 100, 200)]
    assert [len(p) for p in pages] == [100, 100, 16]
    assert pages[2][-1].title == "task 0 rename"  # the oldest can be reached
    assert store.count_sessions(search="RENAME") == 5
    assert [s.title for s in store.list_sessions(search="rename", limit=2)] == ["task 200 rename", "task 150 rename"]
    oldest = pages[2][-1]
    assert [s.id for s in store.list_sessions(search=f"#{oldest.id}")] == [oldest.id]


def test_delete_preview_counts_labels_and_keep_labelled_keeps_them(store):
    session = store.create_session(kind="compare", model="m", mode="model")
    labelled, plain = store.add_edit(session.id, _edit()), store.add_edit(session.id, _edit(strategy="ar"))
    store.save_annotation(edit_id=labelled.id, annotator="ann", label="wrong")
    store.save_annotation(edit_id=labelled.id, annotator="bob", label="correct")
    preview = store.delete_preview(session.id)
    assert (preview.edits, preview.labelled_edits, preview.annotations, preview.annotators) == (2, 1, 2, 2)
    assert store.delete_preview(999) is None
    assert store.delete_session(session.id, keep_labelled=True) is True
    assert store.get_edit(plain.id) is None and store.get_edit(labelled.id) is not None
    assert len(store.annotations()) == 2 and store.get_session(session.id).edit_count == 1
    assert store.agreement("ann", "bob").n == 1
    assert store.delete_session(session.id) is True  # everything, labels included
    assert store.annotations() == [] and store.get_session(session.id) is None


def test_importing_the_same_cases_twice_adds_nothing(store):
    cases = [_edit(case_id=f"HumanEval/{i}", input=f"x = {i}\n", target=f"y = {i}\n", output=f"y = {i}\n",
                   model="oracle") for i in range(6)]
    first = store.import_cases(kind="corpus", model="oracle", mode="reference", title="he: 6", edits=cases)
    assert len(first.edits) == 6 and first.skipped == 0
    again = store.import_cases(kind="corpus", model="oracle", mode="reference", title="he: 6", edits=cases)
    assert again.session is None and again.edits == [] and again.skipped == 6
    more = cases + [_edit(case_id="HumanEval/6", input="z\n", target="w\n", output="w\n", model="oracle")]
    third = store.import_cases(kind="corpus", model="oracle", mode="reference", title="he: 7", edits=more)
    assert [e.case_id for e in third.edits] == ["HumanEval/6"] and third.skipped == 6
    assert store.count_edits() == 7


def test_blind_ab_side_is_stored_and_exported(store):
    session = store.create_session(kind="compare", model="m", mode="model")
    a, b = store.add_edit(session.id, _edit()), store.add_edit(session.id, _edit(strategy="ar"))
    saved = store.save_annotation(edit_id=a.id, annotator="ann", label="correct", preference="B",
                                  other_edit_id=b.id, shown_first_edit_id=b.id)
    assert saved.shown_first_edit_id == b.id
    assert f'"shown_first_edit_id": {b.id}' in store.export_annotations_jsonl()


def test_an_older_database_file_gains_the_new_column(tmp_path):
    path = tmp_path / "old.sqlite3"
    Storage(str(path)).close()
    raw = sqlite3.connect(path)
    raw.execute("ALTER TABLE annotations DROP COLUMN shown_first_edit_id")
    raw.commit()
    raw.close()
    store = Storage(str(path))  # must not fail on the missing column
    session = store.create_session(kind="edit", model="m", mode="model")
    edit = store.add_edit(session.id, _edit())
    assert store.save_annotation(edit_id=edit.id, annotator="a", label="wrong").shown_first_edit_id is None
    store.close()


def test_finishing_an_edit_whose_session_was_deleted_says_so(store):
    session = store.create_session(kind="edit", model="m", mode="model")
    running = store.start_edit(session.id, _edit())
    store.delete_session(session.id)
    with pytest.raises(StorageError, match="does not exist"):
        store.finish_edit(running.id, _edit(output="x"))
