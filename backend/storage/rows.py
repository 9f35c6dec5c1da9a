"""ORM row <-> frozen record conversion. Private to backend.storage."""

from __future__ import annotations

from collections.abc import Sequence

from backend.storage.engine import StorageError, aware, now_utc
from backend.storage.models import AnnotationRow, EditRow, SessionRow
from backend.storage.records import AnnotationRecord, EditRecord, NewEdit, SessionRecord


def annotator_name(name: str) -> str:
    clean = (name or "").strip()
    if not clean:
        raise StorageError("enter an annotator name first")
    if len(clean) > 100:
        raise StorageError("annotator name is longer than 100 characters")
    return clean


def fill_edit_row(row: EditRow, edit: NewEdit) -> EditRow:
    row.input, row.instruction, row.target = edit.input, edit.instruction, edit.target
    row.program, row.output, row.strategy = edit.program, edit.output, edit.strategy
    row.model, row.mode, row.partial = edit.model, edit.mode, edit.partial
    row.stop_reason, row.error, row.case_id = edit.stop_reason, edit.error, edit.case_id
    row.metrics, row.events = dict(edit.metrics), dict(edit.events)
    return row


def edit_row(session_id: int, edit: NewEdit) -> EditRow:
    return fill_edit_row(EditRow(session_id=session_id, created_at=now_utc()), edit)


def edit_record(row: EditRow) -> EditRecord:
    return EditRecord(
        id=row.id, session_id=row.session_id, created_at=aware(row.created_at), input=row.input,
        instruction=row.instruction or "", target=row.target, program=row.program, output=row.output,
        strategy=row.strategy, model=row.model, mode=row.mode, partial=bool(row.partial),
        stop_reason=row.stop_reason, error=row.error, metrics=dict(row.metrics or {}),
        events=dict(row.events or {}), case_id=row.case_id,
    )


def session_record(row: SessionRow, edits: Sequence[EditRow]) -> SessionRecord:
    speedups = [
        float(e.metrics["speedup"])
        for e in edits
        if e.strategy == "cad" and isinstance((e.metrics or {}).get("speedup"), (int, float))
    ]
    return SessionRecord(
        id=row.id, created_at=aware(row.created_at), kind=row.kind, model=row.model, mode=row.mode,
        input_chars=row.input_chars, input_lines=row.input_lines, title=row.title or "",
        edit_count=len(edits), output_chars=max((len(e.output) for e in edits), default=0),
        speedup=max(speedups) if speedups else None,
    )


def annotation_record(row: AnnotationRow, annotator: str) -> AnnotationRecord:
    return AnnotationRecord(
        id=row.id, edit_id=row.edit_id, annotator=annotator, label=row.label, error_kind=row.error_kind,
        preference=row.preference, other_edit_id=row.other_edit_id, note=row.note or "",
        created_at=aware(row.created_at), shown_first_edit_id=row.shown_first_edit_id,
    )
