"""Storage: sessions, edits, annotators and annotations in SQLite (default) or any SQLAlchemy URL.

Every public method opens its own short transaction and returns frozen records
(backend.storage.records), never ORM rows. Writes are committed before the method returns, so a
caller that reports "saved" after `add_edit` returns is telling the truth.

SQLite: WAL journal, synchronous=NORMAL, foreign keys on, busy_timeout (5 s by default): readers
never block the single writer, and a writer waits for the lock inside SQLite. If the lock is still
held after that, the write is retried a few times with backoff and then fails with
`StorageBusyError`, whose message says the database is busy and where it is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from backend.storage.agreement import Agreement, cohen_kappa
from backend.storage.export import annotations_csv, annotations_jsonl, sessions_jsonl
from backend.storage.models import AnnotationRow, AnnotatorRow, Base, EditRow, SessionRow
from backend.storage.records import (
    ERROR_KINDS,
    LABELS,
    PREFERENCES,
    AnnotationRecord,
    AnnotatorRecord,
    EditRecord,
    NewEdit,
    SessionRecord,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DB_PATH = REPO_ROOT / "var" / "copy_as_decode.sqlite3"
DB_ENV = "COPY_AS_DECODE_DB"

T = TypeVar("T")


class StorageError(Exception):
    """A request storage refuses (unknown edit, bad label ...): the message is for the user."""


class StorageBusyError(StorageError):
    """The database stayed locked by another writer through every retry."""


def default_db_url() -> str:
    """$COPY_AS_DECODE_DB (a URL, or a plain file path for SQLite), else var/copy_as_decode.sqlite3."""
    configured = os.environ.get(DB_ENV, "").strip()
    return to_db_url(configured) if configured else to_db_url(str(DEFAULT_DB_PATH))


def to_db_url(url_or_path: str) -> str:
    """A SQLAlchemy URL as given, or `sqlite:///<absolute path>` for a plain file path."""
    if "://" in url_or_path:
        return url_or_path
    return f"sqlite:///{Path(url_or_path).expanduser().resolve()}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # stored naive UTC (SQLite keeps no zone)


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _is_locked(error: OperationalError) -> bool:
    text = str(error.orig if error.orig is not None else error).lower()
    return "locked" in text or "busy" in text


def _line_count(text: str) -> int:
    if not text:
        return 0
    # \n, \r\n and lone \r are line breaks (backend.core.lines); count without importing core.
    breaks = text.count("\n") + text.count("\r") - text.count("\r\n")
    return breaks + (0 if text.endswith(("\n", "\r")) else 1)


class Storage:
    """All persistence of the app. Thread-safe: one engine, one short SQLAlchemy session per call."""

    def __init__(
        self,
        url: str | None = None,
        *,
        busy_timeout_ms: int = 5000,
        retries: int = 4,
        retry_backoff_s: float = 0.05,
        echo: bool = False,
    ) -> None:
        self.url = to_db_url(url) if url else default_db_url()
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.engine: Engine = self._make_engine(self.url, busy_timeout_ms, echo)
        Base.metadata.create_all(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @staticmethod
    def _make_engine(url: str, busy_timeout_ms: int, echo: bool) -> Engine:
        if not url.startswith("sqlite"):
            return create_engine(url, echo=echo, pool_pre_ping=True)
        database = url.split("///", 1)[1] if "///" in url else ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, echo=echo, connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.close()

        return engine

    def close(self) -> None:
        self.engine.dispose()

    @property
    def location(self) -> str:
        """The database as shown to users: the file path for SQLite, else the URL without password."""
        if self.url.startswith("sqlite:///"):
            return self.url.removeprefix("sqlite:///")
        return self.engine.url.render_as_string(hide_password=True)

    # -- transactions ---------------------------------------------------------------------------

    def _write(self, work: Callable[[Session], T]) -> T:
        """Run `work` in one transaction and commit; retry when the database is locked."""
        attempt = 0
        while True:
            try:
                with self._sessions() as session, session.begin():
                    return work(session)
            except OperationalError as error:
                if not _is_locked(error) or attempt >= self.retries:
                    if _is_locked(error):
                        raise StorageBusyError(
                            f"the database is busy: another writer held {self.location} locked through "
                            f"{attempt + 1} attempts; nothing was saved, try again"
                        ) from error
                    raise
                time.sleep(self.retry_backoff_s * (2**attempt))
                attempt += 1

    def _read(self, work: Callable[[Session], T]) -> T:
        with self._sessions() as session:
            return work(session)

    # -- sessions and edits ---------------------------------------------------------------------

    def create_session(self, *, kind: str, model: str, mode: str, input_text: str = "", title: str = "") -> SessionRecord:
        def work(db: Session) -> SessionRecord:
            row = SessionRow(
                created_at=_now(), kind=kind, model=model, mode=mode, title=title[:200],
                input_chars=len(input_text), input_lines=_line_count(input_text),
            )
            db.add(row)
            db.flush()
            return _session_record(row, [])

        return self._write(work)

    def add_edit(self, session_id: int, edit: NewEdit) -> EditRecord:
        """Store one finished (or partial) edit; committed when this returns."""

        def work(db: Session) -> EditRecord:
            if db.get(SessionRow, session_id) is None:
                raise StorageError(f"session {session_id} does not exist (deleted?)")
            row = _edit_row(session_id, edit)
            db.add(row)
            db.flush()
            return _edit_record(row)

        return self._write(work)

    def add_session_with_edits(
        self, *, kind: str, model: str, mode: str, title: str, edits: Sequence[NewEdit]
    ) -> tuple[SessionRecord, list[EditRecord]]:
        """A session and all its edits in one transaction (e.g. corpus cases imported for annotation)."""

        def work(db: Session) -> tuple[SessionRecord, list[EditRecord]]:
            session = SessionRow(
                created_at=_now(), kind=kind, model=model, mode=mode, title=title[:200],
                input_chars=sum(len(e.input) for e in edits), input_lines=sum(_line_count(e.input) for e in edits),
            )
            db.add(session)
            db.flush()
            rows = [_edit_row(session.id, e) for e in edits]
            db.add_all(rows)
            db.flush()
            return _session_record(session, rows), [_edit_record(r) for r in rows]

        return self._write(work)

    def get_session(self, session_id: int) -> SessionRecord | None:
        def work(db: Session) -> SessionRecord | None:
            row = db.get(SessionRow, session_id)
            return None if row is None else _session_record(row, list(row.edits))

        return self._read(work)

    def list_sessions(self, *, limit: int = 200, offset: int = 0) -> list[SessionRecord]:
        """Newest first."""

        def work(db: Session) -> list[SessionRecord]:
            rows = db.scalars(
                select(SessionRow).order_by(SessionRow.id.desc()).limit(limit).offset(offset)
            ).all()
            edits_by_session: dict[int, list[EditRow]] = {r.id: [] for r in rows}
            if rows:
                for edit in db.scalars(select(EditRow).where(EditRow.session_id.in_(list(edits_by_session)))):
                    edits_by_session[edit.session_id].append(edit)
            return [_session_record(r, edits_by_session[r.id]) for r in rows]

        return self._read(work)

    def session_edits(self, session_id: int) -> list[EditRecord]:
        def work(db: Session) -> list[EditRecord]:
            rows = db.scalars(select(EditRow).where(EditRow.session_id == session_id).order_by(EditRow.id))
            return [_edit_record(r) for r in rows]

        return self._read(work)

    def get_edit(self, edit_id: int) -> EditRecord | None:
        def work(db: Session) -> EditRecord | None:
            row = db.get(EditRow, edit_id)
            return None if row is None else _edit_record(row)

        return self._read(work)

    def list_edits(self, *, limit: int = 500) -> list[EditRecord]:
        def work(db: Session) -> list[EditRecord]:
            return [_edit_record(r) for r in db.scalars(select(EditRow).order_by(EditRow.id.desc()).limit(limit))]

        return self._read(work)

    def count_edits(self) -> int:
        return self._read(lambda db: int(db.scalar(select(func.count(EditRow.id))) or 0))

    def delete_session(self, session_id: int) -> bool:
        """Delete a session with its edits and their annotations. False if it did not exist."""

        def work(db: Session) -> bool:
            row = db.get(SessionRow, session_id)
            if row is None:
                return False
            edit_ids = [e.id for e in row.edits]
            if edit_ids:  # explicit, so non-SQLite backends without ON DELETE CASCADE behave the same
                for annotation in db.scalars(select(AnnotationRow).where(AnnotationRow.edit_id.in_(edit_ids))):
                    db.delete(annotation)
                for annotation in db.scalars(
                    select(AnnotationRow).where(AnnotationRow.other_edit_id.in_(edit_ids))
                ):
                    annotation.other_edit_id = None
            db.delete(row)
            return True

        return self._write(work)

    # -- annotators and annotations -------------------------------------------------------------

    def ensure_annotator(self, name: str) -> AnnotatorRecord:
        clean = _annotator_name(name)

        def work(db: Session) -> AnnotatorRecord:
            row = db.scalar(select(AnnotatorRow).where(AnnotatorRow.name == clean))
            if row is None:
                row = AnnotatorRow(name=clean, created_at=_now())
                db.add(row)
                db.flush()
            return AnnotatorRecord(row.id, row.name, _aware(row.created_at))

        return self._write(work)

    def annotators(self) -> list[AnnotatorRecord]:
        def work(db: Session) -> list[AnnotatorRecord]:
            rows = db.scalars(select(AnnotatorRow).order_by(AnnotatorRow.name))
            return [AnnotatorRecord(r.id, r.name, _aware(r.created_at)) for r in rows]

        return self._read(work)

    def save_annotation(
        self,
        *,
        edit_id: int,
        annotator: str,
        label: str,
        error_kind: str | None = None,
        preference: str | None = None,
        other_edit_id: int | None = None,
        note: str = "",
    ) -> AnnotationRecord:
        """Store (or replace) `annotator`'s judgement of an edit; committed when this returns.

        Rejects (StorageError): unknown label / error kind / preference, an unknown edit, a
        preference without the other edit, or an empty annotator name.
        """
        name = _annotator_name(annotator)
        if label not in LABELS:
            raise StorageError(f"label must be one of {', '.join(LABELS)}, got {label!r}")
        if error_kind is not None and error_kind not in ERROR_KINDS:
            raise StorageError(f"error kind must be one of {', '.join(ERROR_KINDS)}, got {error_kind!r}")
        if preference is not None and preference not in PREFERENCES:
            raise StorageError(f"preference must be one of {', '.join(PREFERENCES)}, got {preference!r}")
        if preference is not None and other_edit_id is None:
            raise StorageError("an A/B preference needs the other edit (B) to compare with")

        def work(db: Session) -> AnnotationRecord:
            if db.get(EditRow, edit_id) is None:
                raise StorageError(f"edit {edit_id} does not exist (deleted?)")
            if other_edit_id is not None and db.get(EditRow, other_edit_id) is None:
                raise StorageError(f"edit {other_edit_id} (B) does not exist")
            person = db.scalar(select(AnnotatorRow).where(AnnotatorRow.name == name))
            if person is None:
                person = AnnotatorRow(name=name, created_at=_now())
                db.add(person)
                db.flush()
            row = db.scalar(
                select(AnnotationRow).where(AnnotationRow.edit_id == edit_id, AnnotationRow.annotator_id == person.id)
            )
            if row is None:
                row = AnnotationRow(edit_id=edit_id, annotator_id=person.id)
                db.add(row)
            row.label = label
            row.error_kind = error_kind
            row.preference = preference
            row.other_edit_id = other_edit_id
            row.note = note
            row.created_at = _now()
            db.flush()
            return _annotation_record(row, person.name)

        return self._write(work)

    def annotations(self, *, annotator: str | None = None, edit_id: int | None = None) -> list[AnnotationRecord]:
        def work(db: Session) -> list[AnnotationRecord]:
            query = select(AnnotationRow, AnnotatorRow.name).join(AnnotatorRow).order_by(AnnotationRow.id)
            if annotator is not None:
                query = query.where(AnnotatorRow.name == annotator.strip())
            if edit_id is not None:
                query = query.where(AnnotationRow.edit_id == edit_id)
            return [_annotation_record(row, name) for row, name in db.execute(query)]

        return self._read(work)

    def annotation_queue(self, annotator: str, *, limit: int = 500) -> list[EditRecord]:
        """Stored edits `annotator` has not labelled yet, oldest first."""
        name = annotator.strip()

        def work(db: Session) -> list[EditRecord]:
            done = (
                select(AnnotationRow.edit_id)
                .join(AnnotatorRow)
                .where(AnnotatorRow.name == name)
            )
            rows = db.scalars(select(EditRow).where(EditRow.id.not_in(done)).order_by(EditRow.id).limit(limit))
            return [_edit_record(r) for r in rows]

        return self._read(work)

    def agreement(self, annotator_a: str, annotator_b: str) -> Agreement:
        """Cohen's kappa over the edits both annotators labelled (label: correct/partly/wrong)."""
        labels_a = {a.edit_id: a.label for a in self.annotations(annotator=annotator_a)}
        labels_b = {a.edit_id: a.label for a in self.annotations(annotator=annotator_b)}
        shared = sorted(labels_a.keys() & labels_b.keys())
        return cohen_kappa([labels_a[i] for i in shared], [labels_b[i] for i in shared])

    # -- exports --------------------------------------------------------------------------------

    def _annotations_with_edits(self) -> list[tuple[AnnotationRecord, EditRecord | None]]:
        annotations = self.annotations()

        def work(db: Session) -> dict[int, EditRecord]:
            ids = {a.edit_id for a in annotations}
            rows = db.scalars(select(EditRow).where(EditRow.id.in_(ids))) if ids else []
            return {r.id: _edit_record(r) for r in rows}

        edits = self._read(work)
        return [(a, edits.get(a.edit_id)) for a in annotations]

    def export_annotations_jsonl(self) -> str:
        return annotations_jsonl(self._annotations_with_edits())

    def export_annotations_csv(self) -> str:
        return annotations_csv(self._annotations_with_edits())

    def export_sessions_jsonl(self, session_ids: Iterable[int] | None = None) -> str:
        sessions = (
            self.list_sessions(limit=1_000_000)
            if session_ids is None
            else [s for s in (self.get_session(i) for i in session_ids) if s is not None]
        )
        return sessions_jsonl([(s, self.session_edits(s.id)) for s in sessions])


# -- row <-> record -----------------------------------------------------------------------------


def _annotator_name(name: str) -> str:
    clean = (name or "").strip()
    if not clean:
        raise StorageError("enter an annotator name first")
    if len(clean) > 100:
        raise StorageError("annotator name is longer than 100 characters")
    return clean


def _edit_row(session_id: int, edit: NewEdit) -> EditRow:
    return EditRow(
        session_id=session_id, created_at=_now(), input=edit.input, instruction=edit.instruction,
        target=edit.target, program=edit.program, output=edit.output, strategy=edit.strategy,
        model=edit.model, mode=edit.mode, partial=edit.partial, stop_reason=edit.stop_reason,
        error=edit.error, metrics=dict(edit.metrics), events=dict(edit.events), case_id=edit.case_id,
    )


def _edit_record(row: EditRow) -> EditRecord:
    return EditRecord(
        id=row.id, session_id=row.session_id, created_at=_aware(row.created_at), input=row.input,
        instruction=row.instruction or "", target=row.target, program=row.program, output=row.output,
        strategy=row.strategy, model=row.model, mode=row.mode, partial=bool(row.partial),
        stop_reason=row.stop_reason, error=row.error, metrics=dict(row.metrics or {}),
        events=dict(row.events or {}), case_id=row.case_id,
    )


def _session_record(row: SessionRow, edits: Sequence[EditRow]) -> SessionRecord:
    speedups = [
        float(e.metrics["speedup"])
        for e in edits
        if e.strategy == "cad" and isinstance((e.metrics or {}).get("speedup"), (int, float))
    ]
    return SessionRecord(
        id=row.id, created_at=_aware(row.created_at), kind=row.kind, model=row.model, mode=row.mode,
        input_chars=row.input_chars, input_lines=row.input_lines, title=row.title or "",
        edit_count=len(edits), output_chars=max((len(e.output) for e in edits), default=0),
        speedup=max(speedups) if speedups else None,
    )


def _annotation_record(row: AnnotationRow, annotator: str) -> AnnotationRecord:
    return AnnotationRecord(
        id=row.id, edit_id=row.edit_id, annotator=annotator, label=row.label, error_kind=row.error_kind,
        preference=row.preference, other_edit_id=row.other_edit_id, note=row.note or "",
        created_at=_aware(row.created_at),
    )
