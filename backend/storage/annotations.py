"""Annotators, annotations, agreement and annotation exports: the labelling half of Storage."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.storage.agreement import Agreement, cohen_kappa
from backend.storage.engine import Database, StorageError, aware, now_utc
from backend.storage.export import annotations_csv, annotations_jsonl
from backend.storage.models import AnnotationRow, AnnotatorRow, EditRow
from backend.storage.records import (
    ERROR_KINDS,
    LABELS,
    PREFERENCES,
    AnnotationRecord,
    AnnotatorRecord,
    EditRecord,
)
from backend.storage.rows import annotation_record, annotator_name, edit_record


def _check_judgement(label: str, error_kind: str | None, preference: str | None, other_edit_id: int | None) -> None:
    if label not in LABELS:
        raise StorageError(f"label must be one of {', '.join(LABELS)}, got {label!r}")
    if error_kind is not None and error_kind not in ERROR_KINDS:
        raise StorageError(f"error kind must be one of {', '.join(ERROR_KINDS)}, got {error_kind!r}")
    if preference is not None and preference not in PREFERENCES:
        raise StorageError(f"preference must be one of {', '.join(PREFERENCES)}, got {preference!r}")
    if preference is not None and other_edit_id is None:
        raise StorageError("an A/B preference needs the other edit (B) to compare with")


class AnnotationStore(Database):
    def ensure_annotator(self, name: str) -> AnnotatorRecord:
        clean = annotator_name(name)

        def work(db: Session) -> AnnotatorRecord:
            row = self._annotator_row(db, clean)
            return AnnotatorRecord(row.id, row.name, aware(row.created_at))

        return self._write(work)

    @staticmethod
    def _annotator_row(db: Session, name: str) -> AnnotatorRow:
        row = db.scalar(select(AnnotatorRow).where(AnnotatorRow.name == name))
        if row is None:
            row = AnnotatorRow(name=name, created_at=now_utc())
            db.add(row)
            db.flush()
        return row

    def annotators(self) -> list[AnnotatorRecord]:
        def work(db: Session) -> list[AnnotatorRecord]:
            rows = db.scalars(select(AnnotatorRow).order_by(AnnotatorRow.name))
            return [AnnotatorRecord(r.id, r.name, aware(r.created_at)) for r in rows]

        return self._read(work)

    def save_annotation(
        self, *, edit_id: int, annotator: str, label: str, error_kind: str | None = None,
        preference: str | None = None, other_edit_id: int | None = None, note: str = "",
        shown_first_edit_id: int | None = None,
    ) -> AnnotationRecord:
        """Store (or replace) `annotator`'s judgement of an edit; committed when this returns.

        `preference` is "A" (this edit), "B" (other_edit_id) or "same", whatever side each was
        shown on; `shown_first_edit_id` records which of the two the annotator saw on the left.
        Rejects (StorageError): unknown label / error kind / preference, an unknown edit, a
        preference without the other edit, or an empty annotator name.
        """
        name = annotator_name(annotator)
        _check_judgement(label, error_kind, preference, other_edit_id)

        def work(db: Session) -> AnnotationRecord:
            if db.get(EditRow, edit_id) is None:
                raise StorageError(f"edit {edit_id} does not exist (deleted?)")
            if other_edit_id is not None and db.get(EditRow, other_edit_id) is None:
                raise StorageError(f"edit {other_edit_id} (B) does not exist")
            person = self._annotator_row(db, name)
            row = db.scalar(
                select(AnnotationRow).where(AnnotationRow.edit_id == edit_id, AnnotationRow.annotator_id == person.id)
            )
            if row is None:
                row = AnnotationRow(edit_id=edit_id, annotator_id=person.id)
                db.add(row)
            row.label, row.error_kind, row.preference = label, error_kind, preference
            row.other_edit_id, row.note, row.created_at = other_edit_id, note, now_utc()
            row.shown_first_edit_id = shown_first_edit_id if preference is not None else None
            db.flush()
            return annotation_record(row, person.name)

        return self._write(work)

    def annotations(self, *, annotator: str | None = None, edit_id: int | None = None) -> list[AnnotationRecord]:
        def work(db: Session) -> list[AnnotationRecord]:
            query = select(AnnotationRow, AnnotatorRow.name).join(AnnotatorRow).order_by(AnnotationRow.id)
            if annotator is not None:
                query = query.where(AnnotatorRow.name == annotator.strip())
            if edit_id is not None:
                query = query.where(AnnotationRow.edit_id == edit_id)
            return [annotation_record(row, name) for row, name in db.execute(query)]

        return self._read(work)

    def annotation_queue(self, annotator: str, *, limit: int = 500) -> list[EditRecord]:
        """Stored, finished edits `annotator` has not labelled yet, oldest first (a run still in
        progress is not judged)."""
        name = annotator.strip()

        def work(db: Session) -> list[EditRecord]:
            done = select(AnnotationRow.edit_id).join(AnnotatorRow).where(AnnotatorRow.name == name)
            rows = db.scalars(
                select(EditRow).where(EditRow.id.not_in(done), EditRow.stop_reason != "running")
                .order_by(EditRow.id).limit(limit)
            )
            return [edit_record(r) for r in rows]

        return self._read(work)

    def agreement(self, annotator_a: str, annotator_b: str) -> Agreement:
        """Cohen's kappa over the edits both annotators labelled (label: correct/partly/wrong)."""
        labels_a = {a.edit_id: a.label for a in self.annotations(annotator=annotator_a)}
        labels_b = {a.edit_id: a.label for a in self.annotations(annotator=annotator_b)}
        shared = sorted(labels_a.keys() & labels_b.keys())
        return cohen_kappa([labels_a[i] for i in shared], [labels_b[i] for i in shared])

    def _annotations_with_edits(self) -> list[tuple[AnnotationRecord, EditRecord | None]]:
        annotations = self.annotations()

        def work(db: Session) -> dict[int, EditRecord]:
            ids = {a.edit_id for a in annotations}
            rows = db.scalars(select(EditRow).where(EditRow.id.in_(ids))) if ids else []
            return {r.id: edit_record(r) for r in rows}

        edits = self._read(work)
        return [(a, edits.get(a.edit_id)) for a in annotations]

    def export_annotations_jsonl(self) -> str:
        return annotations_jsonl(self._annotations_with_edits())

    def export_annotations_csv(self) -> str:
        return annotations_csv(self._annotations_with_edits())
