"""What every command shares: usage errors that exit 2 in one line, and the output contract.

Contract: a command prints a readable table, then, as its last stdout line, one JSON document.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad usage or bad input: printed as one line on stderr, exit status 2, no traceback."""


def emit(table: str, document: dict[str, Any]) -> None:
    """Print the human table, then the machine-readable JSON document as the final line."""
    if table:
        sys.stdout.write(table.rstrip("\n") + "\n")
    sys.stdout.write(json.dumps(document, ensure_ascii=False, sort_keys=True) + "\n")
    sys.stdout.flush()


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """Fixed-width text table; floats get 4 significant digits."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    body = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(lines)


MAX_FILE_BYTES = 16 * 1024 * 1024  # far above any input the engine accepts; stops /dev/zero at once


def read_text_file(path: str, what: str, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A file's text, decoded as strict UTF-8 with line endings untouched (CRLF and lone CR kept).
    Rejects a missing file, a directory, an unreadable file, one larger than `max_bytes` (read no
    further: /dev/zero or a pipe ends there) and non-UTF-8 bytes (UsageError)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise UsageError(f"{what} file {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{what} file {path}: is a directory") from None
    except OSError as error:
        raise UsageError(f"{what} file {path}: cannot read ({error.strerror or error})") from None
    if len(data) > max_bytes:
        raise UsageError(f"{what} file {path}: larger than {max_bytes:,} bytes; not read further")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"{what} file {path}: not valid UTF-8 (byte {error.start})") from None



def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`, with a clear error otherwise."""
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


non_negative_int = int_at_least(0)
positive_int = int_at_least(1)
