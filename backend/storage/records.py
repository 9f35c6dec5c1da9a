"""Plain frozen records: what storage hands to the rest of the code (never ORM rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

LABELS = ("correct", "partly_correct", "wrong")
ERROR_KINDS = ("span_selection", "generated_content", "format")
PREFERENCES = ("A", "B", "same")


@dataclass(frozen=True)
class SessionRecord:
    """One user action: a single edit ("edit"), a three-way comparison ("compare"),
    or a batch of corpus cases imported for annotation ("corpus")."""

    id: int
    created_at: datetime
    kind: str
    model: str
    mode: str
    input_chars: int
    input_lines: int
    title: str
    edit_count: int = 0
    output_chars: int = 0
    speedup: float | None = None  # best estimated speed-up among the session's cad edits


@dataclass(frozen=True)
class EditRecord:
    id: int
    session_id: int
    created_at: datetime
    input: str
    instruction: str
    target: str | None
    program: str | None
    output: str
    strategy: str
    model: str
    mode: str
    partial: bool
    stop_reason: str
    error: str | None
    metrics: dict[str, Any] = field(default_factory=dict)
    events: dict[str, Any] = field(default_factory=dict)  # event summary, see backend.storage.db
    case_id: str | None = None


@dataclass(frozen=True)
class AnnotatorRecord:
    id: int
    name: str
    created_at: datetime


@dataclass(frozen=True)
class AnnotationRecord:
    id: int
    edit_id: int
    annotator: str
    label: str
    error_kind: str | None
    preference: str | None  # "A" = this edit's output, "B" = other_edit_id's output, "same"
    other_edit_id: int | None
    note: str
    created_at: datetime
    shown_first_edit_id: int | None = None  # blind A/B: the edit shown on the left


@dataclass(frozen=True)
class NewEdit:
    """What the service hands storage to save: a finished (or cancelled, partial) decode."""

    input: str
    instruction: str
    output: str
    strategy: str
    model: str
    mode: str
    program: str | None = None
    target: str | None = None
    partial: bool = False
    stop_reason: str = "complete"
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    events: dict[str, Any] = field(default_factory=dict)
    case_id: str | None = None


@dataclass(frozen=True)
class DeletePreview:
    """What deleting a session takes with it, for the confirmation the user sees first."""

    session_id: int
    edits: int
    labelled_edits: int   # edits with at least one human label
    annotations: int      # labels on this session's edits
    annotators: int


@dataclass(frozen=True)
class ImportResult:
    session: SessionRecord | None  # None when every case was already stored
    edits: list[EditRecord]
    skipped: int                   # cases already imported (same corpus case id, input and target)
