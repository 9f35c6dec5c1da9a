"""Storage: sessions, edits, annotators and annotations in SQLite (default) or any SQLAlchemy URL.

Every public method opens its own short transaction and returns frozen records
(backend.storage.records), never ORM rows. Writes are committed before the method returns, so a
caller that reports "saved" after `add_edit` returns is telling the truth.

A run's life in storage: `start_edit` stores it as "running" before the first token, so a crash
leaves a row; `checkpoint_edit` keeps the partial text as it grows; `finish_edit` writes the
result. `mark_interrupted` (called when a server starts) turns rows left "running" by a dead
process into "interrupted" edits with what was produced, marked partial.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from backend.core.lines import line_count
from backend.storage.annotations import AnnotationStore
from backend.storage.engine import StorageError, now_utc
from backend.storage.export import sessions_jsonl
from backend.storage.models import AnnotationRow, EditRow, SessionRow
from backend.storage.records import DeletePreview, EditRecord, ImportResult, NewEdit, SessionRecord
from backend.storage.rows import edit_record, edit_row, fill_edit_row, session_record

RUNNING = "running"
INTERRUPTED = "interrupted"
INTERRUPTED_NOTE = "the server stopped during this run; the text produced until its last checkpoint is kept"


class Storage(AnnotationStore):
    """All persistence of the app. Thread-safe: one engine, one short SQLAlchemy session per call."""

    # -- sessions -------------------------------------------------------------------------------

    def create_session(self, *, kind: str, model: str, mode: str, input_text: str = "", title: str = "") -> SessionRecord:
        def work(db: Session) -> SessionRecord:
            row = SessionRow(
                created_at=now_utc(), kind=kind, model=model, mode=mode, title=title[:200],
                input_chars=len(input_text), input_lines=line_count(input_text),
            )
            db.add(row)
            db.flush()
            return session_record(row, [])

        return self._write(work)

    def get_session(self, session_id: int) -> SessionRecord | None:
        def work(db: Session) -> SessionRecord | None:
            row = db.get(SessionRow, session_id)
            return None if row is None else session_record(row, list(row.edits))

        return self._read(work)

    @staticmethod
    def _matching(query: Select[Any], search: str) -> Select[Any]:
        """Sessions whose title contains `search` (case-insensitive), or whose id it is ("#12" or "12")."""
        words = search.strip()
        if not words:
            return query
        condition = SessionRow.title.ilike(f"%{words}%")
        if words.lstrip("#").isdigit():
            condition = or_(condition, SessionRow.id == int(words.lstrip("#")))
        return query.where(condition)

    def list_sessions(self, *, limit: int = 200, offset: int = 0, search: str = "") -> list[SessionRecord]:
        """Newest first; `search` as in count_sessions."""

        def work(db: Session) -> list[SessionRecord]:
            query = self._matching(select(SessionRow), search)
            rows = db.scalars(query.order_by(SessionRow.id.desc()).limit(limit).offset(offset)).all()
            edits_by_session: dict[int, list[EditRow]] = {r.id: [] for r in rows}
            if rows:
                for edit in db.scalars(select(EditRow).where(EditRow.session_id.in_(list(edits_by_session)))):
                    edits_by_session[edit.session_id].append(edit)
            return [session_record(r, edits_by_session[r.id]) for r in rows]

        return self._read(work)

    def count_sessions(self, *, search: str = "") -> int:
        """How many sessions there are (whose title contains `search`, or whose id it is)."""
        query = self._matching(select(func.count(SessionRow.id)), search)
        return self._read(lambda db: int(db.scalar(query) or 0))

    # -- edits ----------------------------------------------------------------------------------

    def add_edit(self, session_id: int, edit: NewEdit) -> EditRecord:
        """Store one finished (or partial) edit; committed when this returns."""

        def work(db: Session) -> EditRecord:
            if db.get(SessionRow, session_id) is None:
                raise StorageError(f"session {session_id} does not exist (deleted?)")
            row = edit_row(session_id, edit)
            db.add(row)
            db.flush()
            return edit_record(row)

        return self._write(work)

    def start_edit(self, session_id: int, edit: NewEdit) -> EditRecord:
        """Store a run about to start, as "running" and partial, so a crash still leaves a row."""
        return self.add_edit(session_id, replace(edit, partial=True, stop_reason=RUNNING))

    def checkpoint_edit(self, edit_id: int, *, output: str, program: str | None, events: dict[str, Any] | None = None) -> bool:
        """Keep the text a running edit has produced so far. False if the edit is gone or finished."""

        def work(db: Session) -> bool:
            values: dict[str, Any] = {"output": output, "program": program}
            if events is not None:
                values["events"] = events
            result = db.execute(
                update(EditRow).where(EditRow.id == edit_id, EditRow.stop_reason == RUNNING).values(**values)
            )
            return bool(result.rowcount)

        return self._write(work)

    def finish_edit(self, edit_id: int, edit: NewEdit) -> EditRecord:
        """Write a started edit's result over its running row; committed when this returns."""

        def work(db: Session) -> EditRecord:
            row = db.get(EditRow, edit_id)
            if row is None:
                raise StorageError(f"edit {edit_id} does not exist (its session was deleted during the run?)")
            fill_edit_row(row, edit)
            db.flush()
            return edit_record(row)

        return self._write(work)

    def mark_interrupted(self) -> int:
        """Rows left "running" by a process that died become "interrupted" partial edits (what was
        produced until the last checkpoint stays). Call once when a server starts. Returns how many."""

        def work(db: Session) -> int:
            result = db.execute(
                update(EditRow).where(EditRow.stop_reason == RUNNING)
                .values(stop_reason=INTERRUPTED, partial=True, error=INTERRUPTED_NOTE)
            )
            return int(result.rowcount or 0)

        return self._write(work)

    def session_edits(self, session_id: int) -> list[EditRecord]:
        def work(db: Session) -> list[EditRecord]:
            rows = db.scalars(select(EditRow).where(EditRow.session_id == session_id).order_by(EditRow.id))
            return [edit_record(r) for r in rows]

        return self._read(work)

    def get_edit(self, edit_id: int) -> EditRecord | None:
        def work(db: Session) -> EditRecord | None:
            row = db.get(EditRow, edit_id)
            return None if row is None else edit_record(row)

        return self._read(work)

    def list_edits(self, *, limit: int = 500) -> list[EditRecord]:
        def work(db: Session) -> list[EditRecord]:
            return [edit_record(r) for r in db.scalars(select(EditRow).order_by(EditRow.id.desc()).limit(limit))]

        return self._read(work)

    def count_edits(self) -> int:
        return self._read(lambda db: int(db.scalar(select(func.count(EditRow.id))) or 0))

    # -- corpus import --------------------------------------------------------------------------

    def add_session_with_edits(
        self, *, kind: str, model: str, mode: str, title: str, edits: Sequence[NewEdit]
    ) -> tuple[SessionRecord, list[EditRecord]]:
        """A session and all its edits in one transaction."""
        return self._write(lambda db: self._session_with_edits(db, kind, model, mode, title, edits))

    @staticmethod
    def _session_with_edits(
        db: Session, kind: str, model: str, mode: str, title: str, edits: Sequence[NewEdit]
    ) -> tuple[SessionRecord, list[EditRecord]]:
        session = SessionRow(
            created_at=now_utc(), kind=kind, model=model, mode=mode, title=title[:200],
            input_chars=sum(len(e.input) for e in edits), input_lines=sum(line_count(e.input) for e in edits),
        )
        db.add(session)
        db.flush()
        rows = [edit_row(session.id, e) for e in edits]
        db.add_all(rows)
        db.flush()
        return session_record(session, rows), [edit_record(r) for r in rows]

    def import_cases(self, *, kind: str, model: str, mode: str, title: str, edits: Sequence[NewEdit]) -> ImportResult:
        """Like add_session_with_edits, but a case already stored (same model, case id, input and
        target) is skipped: importing a corpus twice adds nothing the second time."""

        def work(db: Session) -> ImportResult:
            ids = [e.case_id for e in edits if e.case_id]
            stored = db.execute(
                select(EditRow.case_id, EditRow.input, EditRow.target)
                .where(EditRow.model == model, EditRow.case_id.in_(ids))
            ).all() if ids else []
            seen = {tuple(row) for row in stored}
            fresh = [e for e in edits if (e.case_id, e.input, e.target) not in seen]
            if not fresh:
                return ImportResult(None, [], len(edits))
            session, records = self._session_with_edits(db, kind, model, mode, title, fresh)
            return ImportResult(session, records, len(edits) - len(fresh))

        return self._write(work)

    # -- deleting -------------------------------------------------------------------------------

    def delete_preview(self, session_id: int) -> DeletePreview | None:
        """What delete_session would remove; None if the session does not exist. Changes nothing."""

        def work(db: Session) -> DeletePreview | None:
            if db.get(SessionRow, session_id) is None:
                return None
            edit_ids = select(EditRow.id).where(EditRow.session_id == session_id)
            labels = db.execute(
                select(AnnotationRow.edit_id, AnnotationRow.annotator_id).where(AnnotationRow.edit_id.in_(edit_ids))
            ).all()
            edits = int(db.scalar(select(func.count()).select_from(edit_ids.subquery())) or 0)
            return DeletePreview(
                session_id=session_id, edits=edits, labelled_edits=len({e for e, _ in labels}),
                annotations=len(labels), annotators=len({a for _, a in labels}),
            )

        return self._read(work)

    def delete_session(self, session_id: int, *, keep_labelled: bool = False) -> bool:
        """Delete a session with its edits and their annotations. False if it did not exist.

        keep_labelled: edits carrying human labels stay (with their labels), and so does the
        session if any of them remain; only unlabelled edits go."""

        def work(db: Session) -> bool:
            row = db.get(SessionRow, session_id)
            if row is None:
                return False
            labelled = set(db.scalars(select(AnnotationRow.edit_id).where(
                AnnotationRow.edit_id.in_([e.id for e in row.edits])
            ))) if keep_labelled else set()
            doomed = [e for e in row.edits if e.id not in labelled]
            self._delete_edits(db, [e.id for e in doomed])
            if labelled:
                for edit in doomed:
                    db.delete(edit)
            else:
                db.delete(row)
            return True

        return self._write(work)

    @staticmethod
    def _delete_edits(db: Session, edit_ids: list[int]) -> None:
        if not edit_ids:  # explicit, so non-SQLite backends without ON DELETE CASCADE behave the same
            return
        for annotation in db.scalars(select(AnnotationRow).where(AnnotationRow.edit_id.in_(edit_ids))):
            db.delete(annotation)
        for annotation in db.scalars(select(AnnotationRow).where(AnnotationRow.other_edit_id.in_(edit_ids))):
            annotation.other_edit_id = None

    # -- exports --------------------------------------------------------------------------------

    def export_sessions_jsonl(self, session_ids: Iterable[int] | None = None) -> str:
        sessions = (
            self.list_sessions(limit=1_000_000)
            if session_ids is None
            else [s for s in (self.get_session(i) for i in session_ids) if s is not None]
        )
        return sessions_jsonl([(s, self.session_edits(s.id)) for s in sessions])
