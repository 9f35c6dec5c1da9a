"""Files the app hands out for download live in one folder of its own, pruned as it goes and
removed when the app closes (they used to leave a /tmp folder behind per download, forever).

The folder's name carries the server's process id, so a server that died without closing (SIGKILL,
out of memory, power loss) leaves a folder the next server start recognises and removes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

KEEP_SECONDS = 3600.0  # a download link stays valid this long
KEEP_FILES = 200       # and at most this many files are kept
FOLDER_PREFIX = "copy-as-decode-downloads-"  # + "<pid>-<random>"


def safe_file_name(name: str | None, default: str) -> str:
    if not name:
        return default
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).name)[:80].lstrip(".")
    return stem or default


class DownloadFolder:
    def __init__(self, *, keep_seconds: float = KEEP_SECONDS, keep_files: int = KEEP_FILES) -> None:
        self.orphans_removed = remove_orphaned_folders()
        self.root = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
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


def remove_orphaned_folders(parent: str | Path | None = None) -> list[Path]:
    """Remove download folders of servers that are no longer running; returns what was removed.

    Only folders with our prefix, owned by this user, whose process id names no live process: a
    running server's folder (ours or another's) is never touched."""
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        pid = _owner_pid(folder)
        if pid is None or pid == os.getpid() or _process_alive(pid):
            continue
        try:
            if not folder.is_dir() or folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _owner_pid(folder: Path) -> int | None:
    head = folder.name[len(FOLDER_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: an existence check, nothing is sent
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True
