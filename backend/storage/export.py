"""Annotation and session exports as JSONL (faithful) and CSV (for spreadsheets). Pure functions of records."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

from backend.storage.records import AnnotationRecord, EditRecord, SessionRecord

ANNOTATION_FIELDS = (
    "annotation_id", "edit_id", "annotator", "label", "error_kind", "preference", "other_edit_id",
    "note", "created_at", "shown_first_edit_id", "strategy", "model", "mode", "case_id", "partial", "instruction",
)


def annotation_row(annotation: AnnotationRecord, edit: EditRecord | None) -> dict[str, Any]:
    return {
        "annotation_id": annotation.id,
        "edit_id": annotation.edit_id,
        "annotator": annotation.annotator,
        "label": annotation.label,
        "error_kind": annotation.error_kind,
        "preference": annotation.preference,
        "other_edit_id": annotation.other_edit_id,
        "note": annotation.note,
        "created_at": annotation.created_at.isoformat(),
        "shown_first_edit_id": annotation.shown_first_edit_id,
        "strategy": edit.strategy if edit else None,
        "model": edit.model if edit else None,
        "mode": edit.mode if edit else None,
        "case_id": edit.case_id if edit else None,
        "partial": edit.partial if edit else None,
        "instruction": edit.instruction if edit else None,
    }


def annotations_jsonl(rows: Iterable[tuple[AnnotationRecord, EditRecord | None]]) -> str:
    """One JSON object per line; includes the edit's input and output so the file stands alone."""
    lines = []
    for annotation, edit in rows:
        row = annotation_row(annotation, edit)
        row["input"] = edit.input if edit else None
        row["output"] = edit.output if edit else None
        lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True))
    return "".join(line + "\n" for line in lines)


def _spreadsheet_safe(value: Any) -> Any:
    # A cell starting with = + - @ (or tab/CR) is run as a formula by spreadsheet programs (CSV injection);
    # a leading apostrophe keeps it text. JSONL stays byte-faithful.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def annotations_csv(rows: Iterable[tuple[AnnotationRecord, EditRecord | None]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=ANNOTATION_FIELDS, lineterminator="\n")
    writer.writeheader()
    for annotation, edit in rows:
        writer.writerow({k: _spreadsheet_safe(v) for k, v in annotation_row(annotation, edit).items()})
    return buffer.getvalue()


def sessions_jsonl(sessions: Sequence[tuple[SessionRecord, Sequence[EditRecord]]]) -> str:
    """One line per session, with its edits (input, program, output, metrics, event summary)."""
    lines = []
    for session, edits in sessions:
        lines.append(json.dumps({
            "session_id": session.id,
            "created_at": session.created_at.isoformat(),
            "kind": session.kind,
            "model": session.model,
            "mode": session.mode,
            "title": session.title,
            "edits": [
                {
                    "edit_id": e.id, "strategy": e.strategy, "model": e.model, "mode": e.mode,
                    "instruction": e.instruction, "input": e.input, "target": e.target,
                    "program": e.program, "output": e.output, "partial": e.partial,
                    "stop_reason": e.stop_reason, "error": e.error, "metrics": e.metrics,
                    "events": e.events, "case_id": e.case_id, "created_at": e.created_at.isoformat(),
                }
                for e in edits
            ],
        }, ensure_ascii=False, sort_keys=True))
    return "".join(line + "\n" for line in lines)
