"""Files the app hands out for download live in one folder of its own, pruned as it goes and
removed when the app closes (they used to leave a /tmp folder behind per download, forever)."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

KEEP_SECONDS = 3600.0  # a download link stays valid this long
KEEP_FILES = 200       # and at most this many files are kept


def safe_file_name(name: str | None, default: str) -> str:
    if not name:
        return default
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).name)[:80].lstrip(".")
    return stem or default


class DownloadFolder:
    def __init__(self, *, keep_seconds: float = KEEP_SECONDS, keep_files: int = KEEP_FILES) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="copy-as-decode-"))
        self.keep_seconds = keep_seconds
        self.keep_files = keep_files
        self._lock = threading.Lock()
        self._count = 0

    def write(self, text: str, name: str) -> str:
        """Save `text` byte-exact (CRLF, a missing final newline kept) as `name`; returns the path."""
        with self._lock:
            self._count += 1
            folder = self.root / f"{self._count:06d}"  # same file name from two users never collides
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / safe_file_name(name, "download.txt")
            path.write_bytes(text.encode("utf-8"))
            self._prune()
            return str(path)

    def _prune(self) -> None:
        folders = sorted((p for p in self.root.iterdir() if p.is_dir()), key=lambda p: p.name)
        cutoff = time.time() - self.keep_seconds
        excess = len(folders) - self.keep_files
        for index, folder in enumerate(folders):
            if index < excess or folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
