"""Persistence of the app (SQLAlchemy 2): sessions, edits, annotators, annotations.

Independent of the model runtime. Callers get frozen records (records.py), never ORM rows.
"""

from backend.storage.agreement import Agreement, cohen_kappa
from backend.storage.db import INTERRUPTED, RUNNING, Storage
from backend.storage.engine import (
    DB_ENV,
    DEFAULT_DB_PATH,
    StorageBusyError,
    StorageError,
    default_db_url,
    to_db_url,
)
from backend.storage.records import (
    ERROR_KINDS,
    LABELS,
    PREFERENCES,
    AnnotationRecord,
    AnnotatorRecord,
    DeletePreview,
    EditRecord,
    ImportResult,
    NewEdit,
    SessionRecord,
)

__all__ = [
    "INTERRUPTED", "RUNNING", "DeletePreview", "ImportResult",
    "DB_ENV", "DEFAULT_DB_PATH", "ERROR_KINDS", "LABELS", "PREFERENCES", "Agreement", "AnnotationRecord",
    "AnnotatorRecord", "EditRecord", "NewEdit", "SessionRecord", "Storage", "StorageBusyError",
    "StorageError", "cohen_kappa", "default_db_url", "to_db_url",
]
