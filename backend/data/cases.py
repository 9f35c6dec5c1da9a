"""The edit case: what every corpus yields, and the one error a corpus raises.

Its own module so the corpus loaders and the stdlib probe (which generates cases) both import it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CorpusError", "EditCase"]


class CorpusError(ValueError):
    """A corpus cannot be loaded: unknown name, missing data (with where to get it), or a bad record (file:line)."""


@dataclass(frozen=True)
class EditCase:
    """One edit: `source` -> `target`, with an optional instruction and language; `meta` holds extra fields."""

    id: str
    source: str
    target: str
    instruction: str | None = None
    language: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"id": self.id, "source": self.source, "target": self.target}
        if self.instruction is not None:
            record["instruction"] = self.instruction
        if self.language is not None:
            record["language"] = self.language
        for key, value in self.meta.items():
            record.setdefault(key, value)
        return record
