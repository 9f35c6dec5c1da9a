"""The database connection: URL resolution, the SQLAlchemy engine, short transactions with retry.

SQLite: WAL journal, synchronous=NORMAL, foreign keys on, busy_timeout (5 s by default): readers
never block the single writer, and a writer waits for the lock inside SQLite. If the lock is still
held after that, the write is retried a few times with backoff and then fails with
`StorageBusyError`, whose message says the database is busy (never where it is: users see it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from backend.storage.models import Base

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


def now_utc() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # stored naive UTC (SQLite keeps no zone)


def aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _is_locked(error: OperationalError) -> bool:
    text = str(error.orig if error.orig is not None else error).lower()
    return "locked" in text or "busy" in text


def make_engine(url: str, busy_timeout_ms: int, echo: bool) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, echo=echo, pool_pre_ping=True)
    database = url.split("///", 1)[1] if "///" in url else ""
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, echo=echo, connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.close()

    return engine


def add_missing_columns(engine: Engine) -> list[str]:
    """Add nullable columns a newer version declares to tables an older version created
    (create_all makes missing tables, never missing columns). Returns "table.column" added."""
    inspector = inspect(engine)
    added = []
    for table in Base.metadata.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present and column.nullable:
                kind = column.type.compile(dialect=engine.dialect)
                with engine.begin() as connection:
                    connection.execute(text(f'ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}'))
                added.append(f"{table.name}.{column.name}")
    return added


class Database:
    """One engine, one short SQLAlchemy session per call. Thread-safe."""

    def __init__(
        self, url: str | None = None, *, busy_timeout_ms: int = 5000, retries: int = 4,
        retry_backoff_s: float = 0.05, echo: bool = False,
    ) -> None:
        self.url = to_db_url(url) if url else default_db_url()
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.engine: Engine = make_engine(self.url, busy_timeout_ms, echo)
        Base.metadata.create_all(self.engine)
        add_missing_columns(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    @property
    def location(self) -> str:
        """The database for the operator's log: the file path for SQLite, else the URL without
        password. Not for pages a user sees (a server path tells an attacker about the machine)."""
        if self.url.startswith("sqlite:///"):
            return self.url.removeprefix("sqlite:///")
        return self.engine.url.render_as_string(hide_password=True)

    def _write(self, work: Callable[[Session], T]) -> T:
        """Run `work` in one transaction and commit; retry when the database is locked."""
        attempt = 0
        while True:
            try:
                with self._sessions() as session, session.begin():
                    return work(session)
            except UnicodeEncodeError as error:  # a lone surrogate (U+D800..DFFF) cannot be stored as UTF-8
                raise StorageError(
                    f"the text is not valid Unicode (a lone surrogate U+{ord(error.object[error.start]):04X}); "
                    "nothing was saved"
                ) from None
            except OperationalError as error:
                if not _is_locked(error) or attempt >= self.retries:
                    if _is_locked(error):
                        raise StorageBusyError(
                            f"the database is busy: another writer held it locked through {attempt + 1} attempts; "
                            "nothing was saved, try again"
                        ) from error
                    raise
                time.sleep(self.retry_backoff_s * (2**attempt))
                attempt += 1

    def _read(self, work: Callable[[Session], T]) -> T:
        with self._sessions() as session:
            return work(session)
