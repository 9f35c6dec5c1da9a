"""Helpers for the app's end-to-end tests: a real `python -m app` server on a free loopback port.

`running_app(tmp_dir)` starts the server as a subprocess (tiny-random model, a fresh SQLite file),
waits until the page answers and the model is ready, and stops it (by its own pid) afterwards.
Imported by tests/test_app_e2e.py and tests/test_browser.py (not a conftest: that file is shared).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"
TEST_MODEL = "tiny-random"


@dataclass(frozen=True)
class AppServer:
    url: str
    port: int
    db_path: Path
    log_path: Path
    process: subprocess.Popen

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, process: subprocess.Popen, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"app exited with {process.returncode}:\n{log_path.read_text(errors='replace')}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        time.sleep(0.3)
    raise TimeoutError(f"app did not answer at {url} within {timeout:.0f} s:\n{log_path.read_text(errors='replace')}")


def wait_model_ready(url: str, model: str = TEST_MODEL, timeout: float = 240.0) -> str:
    """Poll the app's model_status API until the model is ready; returns the status text."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = str(client.predict(model, api_name="/model_status"))
        if status.startswith("ready"):
            return status
        if status.startswith("error"):
            raise RuntimeError(status)
        time.sleep(0.5)
    raise TimeoutError(f"model not ready after {timeout:.0f} s: {status}")


@contextlib.contextmanager
def running_app(tmp_dir: Path, *extra_args: str, model: str = TEST_MODEL) -> Iterator[AppServer]:
    port = free_port()
    db_path = tmp_dir / "app.sqlite3"
    log_path = tmp_dir / "app.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", "NO_PROXY": "127.0.0.1"}
    env.pop("COPY_AS_DECODE_DB", None)
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port), "--model", model,
             "--db-url", str(db_path), "--include-random", *extra_args],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/"
    server = AppServer(url=url, port=port, db_path=db_path, log_path=log_path, process=process)
    try:
        _wait_http(url, process, log_path, timeout=120)
        wait_model_ready(url, model)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # our own process group (start_new_session)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
