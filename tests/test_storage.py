"""Storage on a real SQLite file: records not rows, WAL, commits, locks, concurrency, kappa, exports."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import threading
import time
from dataclasses import FrozenInstanceError

import pytest

from backend.storage import (
    NewEdit,
    Storage,
    StorageBusyError,
    StorageError,
    cohen_kappa,
    default_db_url,
    to_db_url,
)
from backend.storage.models import Base


def _edit(text: str = "a\r\nb", **overrides) -> NewEdit:
    fields = dict(
        input=text, instruction="rename b", output="a\r\nc", strategy="cad", model="tiny-random",
        mode="reference", program='<copy lines="1-1"/>\n<gen>c</gen>\n', target="a\r\nc",
        metrics={"tokens_copied": 2, "speedup": 2.5}, events={"spans": [["copy", "a\r\n"], ["gen", "c"]]},
    )
    fields.update(overrides)
    return NewEdit(**fields)


@pytest.fixture
def store(tmp_path):
    storage = Storage(str(tmp_path / "db" / "test.sqlite3"))
    yield storage
    storage.close()


def test_url_resolution__path_env_and_url(tmp_path, monkeypatch):
    monkeypatch.delenv("COPY_AS_DECODE_DB", raising=False)
    assert default_db_url().endswith("/var/copy_as_decode.sqlite3")
    monkeypatch.setenv("COPY_AS_DECODE_DB", str(tmp_path / "x.sqlite3"))
    assert default_db_url() == f"sqlite:///{tmp_path / 'x.sqlite3'}"
    assert to_db_url("postgresql://u:p@h/db") == "postgresql://u:p@h/db"


def test_schema_created_and_wal_pragmas(store, tmp_path):
    path = tmp_path / "db" / "test.sqlite3"
    assert path.exists()
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    tables = {r[0] for r in sqlite3.connect(path).execute("select name from sqlite_master where type='table'")}
    assert set(Base.metadata.tables) <= tables == {"sessions", "edits", "annotations", "annotators"}


def test_edit_roundtrip__byte_exact_committed_and_frozen(store, tmp_path):
    session = store.create_session(kind="edit", model="tiny-random", mode="reference", input_text="a\r\nb")
    assert (session.input_chars, session.input_lines) == (4, 2)
    saved = store.add_edit(session.id, _edit())
    # committed: a separate plain sqlite3 connection sees the row right away
    raw = sqlite3.connect(tmp_path / "db" / "test.sqlite3")
    assert raw.execute("select input, output, partial from edits where id=?", (saved.id,)).fetchone() == (
        "a\r\nb", "a\r\nc", 0,
    )
    loaded = store.get_edit(saved.id)
    assert loaded == saved
    assert loaded.input == "a\r\nb" and loaded.metrics["speedup"] == 2.5
    assert loaded.events["spans"] == [["copy", "a\r\n"], ["gen", "c"]]
    assert loaded.created_at.tzinfo is not None
    with pytest.raises(FrozenInstanceError):
        loaded.output = "x"  # type: ignore[misc]
    listed = store.list_sessions()
    assert [(s.id, s.edit_count, s.speedup) for s in listed] == [(session.id, 1, 2.5)]


def test_add_edit_to_missing_session_is_refused(store):
    with pytest.raises(StorageError, match="session 99 does not exist"):
        store.add_edit(99, _edit())


def test_delete_session_removes_edits_and_their_annotations(store):
    keep = store.create_session(kind="edit", model="m", mode="model")
    gone = store.create_session(kind="compare", model="m", mode="model")
    kept_edit = store.add_edit(keep.id, _edit())
    a = store.add_edit(gone.id, _edit(strategy="ar"))
    b = store.add_edit(gone.id, _edit(strategy="cad"))
    store.save_annotation(edit_id=a.id, annotator="ann", label="wrong")
    store.save_annotation(edit_id=kept_edit.id, annotator="ann", label="correct", preference="B", other_edit_id=b.id)
    assert store.delete_session(gone.id) is True
    assert store.delete_session(gone.id) is False
    assert store.get_edit(a.id) is None and store.session_edits(gone.id) == []
    remaining = store.annotations()
    assert [(r.edit_id, r.other_edit_id) for r in remaining] == [(kept_edit.id, None)]


def test_annotations__replace_queue_validation(store):
    session = store.create_session(kind="edit", model="m", mode="model")
    e1, e2 = store.add_edit(session.id, _edit()), store.add_edit(session.id, _edit(strategy="ar"))
    assert [e.id for e in store.annotation_queue("ann")] == [e1.id, e2.id]
    store.save_annotation(edit_id=e1.id, annotator=" ann ", label="partly_correct", error_kind="format", note="x")
    second = store.save_annotation(edit_id=e1.id, annotator="ann", label="wrong", error_kind="span_selection")
    assert [(a.label, a.error_kind, a.annotator) for a in store.annotations()] == [("wrong", "span_selection", "ann")]
    assert second.note == ""
    assert [e.id for e in store.annotation_queue("ann")] == [e2.id]
    assert [e.id for e in store.annotation_queue("other")] == [e1.id, e2.id]
    assert [a.name for a in store.annotators()] == ["ann"]
    for kwargs, message in [
        (dict(label="great"), "label must be one of"),
        (dict(label="wrong", error_kind="typo"), "error kind must be one of"),
        (dict(label="wrong", preference="C", other_edit_id=e2.id), "preference must be one of"),
        (dict(label="wrong", preference="A"), "needs the other edit"),
        (dict(label="wrong", annotator="  "), "annotator name"),
    ]:
        with pytest.raises(StorageError, match=message):
            store.save_annotation(**{"edit_id": e1.id, "annotator": "ann", **kwargs})
    with pytest.raises(StorageError, match="edit 12345 does not exist"):
        store.save_annotation(edit_id=12345, annotator="ann", label="wrong")


# labels_a, labels_b, kappa (hand-computed)
KAPPA_TABLE = [
    # p_o = 7/10; rates A: c .5 w .3 p .2, B: c .5 p .2 w .3 -> p_e = .25+.09+.04 = .38; (.7-.38)/.62
    ("c c w p c w c p w c".split(), "c p w p c c c w w c".split(), 0.32 / 0.62),
    # 2x2 textbook table: yes/yes 20, yes/no 5, no/yes 10, no/no 15: p_o .7, p_e .5*.6+.5*.4 = .5 -> .4
    (["y"] * 25 + ["n"] * 25, ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15, 0.4),
    (["a", "b"], ["a", "b"], 1.0),
    (["a", "b"], ["b", "a"], -1.0),
]


@pytest.mark.parametrize("labels_a, labels_b, kappa", KAPPA_TABLE)
def test_cohen_kappa__labels_a__labels_b__kappa(labels_a, labels_b, kappa):
    assert cohen_kappa(labels_a, labels_b).kappa == pytest.approx(kappa)


def test_cohen_kappa_undefined_and_mismatched():
    assert cohen_kappa([], []).kappa is None
    same = cohen_kappa(["c", "c"], ["c", "c"])
    assert same.kappa is None and same.observed == 1.0 and "undefined" in same.describe()
    with pytest.raises(ValueError, match="differ in length"):
        cohen_kappa(["a"], [])


def test_agreement_from_stored_annotations(store):
    session = store.create_session(kind="corpus", model="m", mode="reference")
    edits = [store.add_edit(session.id, _edit(case_id=str(i))) for i in range(10)]
    a_labels = ["correct", "correct", "wrong", "partly_correct", "correct", "wrong", "correct", "partly_correct", "wrong", "correct"]
    b_labels = ["correct", "partly_correct", "wrong", "partly_correct", "correct", "correct", "correct", "wrong", "wrong", "correct"]
    for edit, a, b in zip(edits, a_labels, b_labels):
        store.save_annotation(edit_id=edit.id, annotator="alice", label=a)
        store.save_annotation(edit_id=edit.id, annotator="bob", label=b)
    store.save_annotation(edit_id=store.add_edit(session.id, _edit()).id, annotator="alice", label="wrong")  # not shared
    result = store.agreement("alice", "bob")
    assert result.n == 10
    assert result.kappa == pytest.approx(0.32 / 0.62)


def test_exports_jsonl_and_csv(store):
    session = store.create_session(kind="edit", model="m", mode="model")
    edit = store.add_edit(session.id, _edit())
    store.save_annotation(edit_id=edit.id, annotator="ann", label="wrong", error_kind="format", note="=HYPERLINK(1)")
    rows = [json.loads(line) for line in store.export_annotations_jsonl().splitlines()]
    assert rows[0]["label"] == "wrong" and rows[0]["input"] == "a\r\nb" and rows[0]["note"] == "=HYPERLINK(1)"
    table = list(csv.DictReader(io.StringIO(store.export_annotations_csv())))
    assert table[0]["edit_id"] == str(edit.id) and table[0]["error_kind"] == "format"
    assert table[0]["note"] == "'=HYPERLINK(1)"  # spreadsheet formula neutralised
    sessions = [json.loads(line) for line in store.export_sessions_jsonl().splitlines()]
    assert sessions[0]["edits"][0]["program"].startswith("<copy")


def test_concurrent_writers_lose_no_rows(store):
    session = store.create_session(kind="edit", model="m", mode="model")
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        try:
            for i in range(40):
                edit = store.add_edit(session.id, _edit(case_id=f"{worker}-{i}"))
                if i % 4 == 0:
                    store.save_annotation(edit_id=edit.id, annotator=f"w{worker}", label="correct")
        except BaseException as error:  # noqa: BLE001 - surfaced by the assert below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.count_edits() == 200
    assert len({e.case_id for e in store.session_edits(session.id)}) == 200
    assert len(store.annotations()) == 50


def test_locked_database__retries_then_clear_error(tmp_path):
    path = tmp_path / "locked.sqlite3"
    store = Storage(str(path), busy_timeout_ms=50, retries=2, retry_backoff_s=0.01)
    session = store.create_session(kind="edit", model="m", mode="model")
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")  # hold the write lock
    try:
        with pytest.raises(StorageBusyError, match="database is busy.*3 attempts.*nothing was saved"):
            store.add_edit(session.id, _edit())
    finally:
        blocker.execute("ROLLBACK")
    # the lock released part-way through the retries: the write goes through
    blocker.execute("BEGIN IMMEDIATE")
    threading.Timer(0.08, lambda: blocker.execute("ROLLBACK")).start()
    patient = Storage(str(path), busy_timeout_ms=50, retries=6, retry_backoff_s=0.02)
    started = time.monotonic()
    saved = patient.add_edit(session.id, _edit())
    assert saved.id and time.monotonic() - started < 3
    assert store.count_edits() == 1
    store.close()
    patient.close()
