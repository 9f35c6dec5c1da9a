"""SQLAlchemy 2 declarative models. Private to backend.storage: callers get records, not rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class SessionRow(Base):
    __tablename__ = "sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    kind: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(128))
    mode: Mapped[str] = mapped_column(String(16))
    title: Mapped[str] = mapped_column(String(200), default="")
    input_chars: Mapped[int] = mapped_column(Integer, default=0)
    input_lines: Mapped[int] = mapped_column(Integer, default=0)

    edits: Mapped[list[EditRow]] = relationship(
        back_populates="session", cascade="all, delete-orphan", passive_deletes=True, order_by="EditRow.id"
    )


class EditRow(Base):
    __tablename__ = "edits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    input: Mapped[str] = mapped_column(Text)
    instruction: Mapped[str] = mapped_column(Text, default="")
    target: Mapped[str | None] = mapped_column(Text, nullable=True)
    program: Mapped[str | None] = mapped_column(Text, nullable=True)
    output: Mapped[str] = mapped_column(Text)
    strategy: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(128))
    mode: Mapped[str] = mapped_column(String(16))
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    stop_reason: Mapped[str] = mapped_column(String(32), default="complete")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    events: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    case_id: Mapped[str | None] = mapped_column(String(200), nullable=True)

    session: Mapped[SessionRow] = relationship(back_populates="edits")


class AnnotatorRow(Base):
    __tablename__ = "annotators"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class AnnotationRow(Base):
    __tablename__ = "annotations"
    # One current judgement per annotator and edit: saving again replaces it.
    __table_args__ = (UniqueConstraint("edit_id", "annotator_id", name="uq_annotation_edit_annotator"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    edit_id: Mapped[int] = mapped_column(ForeignKey("edits.id", ondelete="CASCADE"), index=True)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id", ondelete="CASCADE"), index=True)
    label: Mapped[str] = mapped_column(String(32))
    error_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    preference: Mapped[str | None] = mapped_column(String(8), nullable=True)
    other_edit_id: Mapped[int | None] = mapped_column(
        ForeignKey("edits.id", ondelete="SET NULL"), nullable=True
    )
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime)
    # blind A/B: which edit the annotator saw on the left (sides are drawn at random per item)
    shown_first_edit_id: Mapped[int | None] = mapped_column(Integer, nullable=True)

    annotator: Mapped[AnnotatorRow] = relationship()
