"""`python -m app loadtest [--clients N] [--edits K] [--kill-restart]`: the load-and-fault harness.

Starts a fresh `python -m app` server on loopback with its own SQLite file, then N concurrent API
clients each run K reference edits (each with its own input and target, so every result can be
checked byte for byte). With --kill-restart the server is killed with SIGKILL once about half of
the edits have finished and started again on the same database; clients whose edit died retry it.
Then the database is checked: every edit reported finished is stored exactly once with the exact
text, SQLite's integrity_check says ok, and no run is left "running" (runs in flight at the kill
are "interrupted"). Prints a table, then as its last stdout line one JSON document:
{"clients", "edits_finished", "edits_stored", "lost", "duplicated", "wrong", "integrity",
"interrupted", "p50_s", "p95_s"}. Exit status 0 when nothing was lost, duplicated or wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-random"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def case(client: int, edit: int) -> tuple[str, str]:
    """A distinct input and desired result per (client, edit): one changed line among copied ones."""
    lines = [f"def step_{client}_{edit}_{i}(value):\n    return value + {i}\n\n" for i in range(6)]
    source = "".join(lines)
    target = source.replace(f"return value + 3\n", f"return value * {client + 2} - {edit}\n")
    return source, target


@dataclass
class Server:
    folder: Path
    clients: int
    model: str
    process: subprocess.Popen | None = None
    url: str = ""
    starts: int = 0

    @property
    def db_path(self) -> Path:
        return self.folder / "loadtest.sqlite3"

    def start(self, timeout: float = 300.0) -> None:
        port = free_port()
        env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", "NO_PROXY": "127.0.0.1"}
        env.pop("COPY_AS_DECODE_DB", None)
        self.starts += 1
        log = open(self.folder / f"server-{self.starts}.log", "w", encoding="utf-8")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port), "--model", self.model,
             "--include-random", "--db-url", str(self.db_path), "--max-waiting", str(self.clients + 2)],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}/"
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from gradio_client import Client

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}; see {self.folder}")
            try:
                status = str(Client(self.url, verbose=False).predict(self.model, api_name="/model_status"))
                if status.startswith("ready"):
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.5)
        raise TimeoutError(f"the server was not ready within {timeout:.0f} s; see {self.folder}")

    def kill(self) -> None:
        """SIGKILL to the server's own process group: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Tally:
    finished: dict[tuple[int, int], int] = field(default_factory=dict)  # (client, edit) -> stored edit id
    attempts: dict[tuple[int, int], int] = field(default_factory=dict)  # submissions per (client, edit)
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(default_factory=threading.Condition)


class Harness:
    def __init__(self, server: Server, clients: int, edits: int, kill_restart: bool) -> None:
        self.server, self.clients, self.edits, self.kill_restart = server, clients, edits, kill_restart
        self.tally = Tally()
        self.up = threading.Event()
        self.up.set()
        self.killed_at: int | None = None
        self.running_at_kill: list[int] = []

    def _one_edit(self, client: int, edit: int) -> bool:
        from gradio_client import Client

        source, target = case(client, edit)
        with self.tally.lock:
            self.tally.attempts[(client, edit)] = self.tally.attempts.get((client, edit), 0) + 1
        started = time.perf_counter()
        final = Client(self.server.url, verbose=False).submit(
            self.server.model, source, f"Change step {client}/{edit}.", "reference", target, 256, api_name="/edit",
        ).result(timeout=300)
        status = str(final[-1])
        if "saved as edit #" not in status:
            raise RuntimeError(status)
        with self.tally.changed:
            self.tally.finished[(client, edit)] = int(status.split("saved as edit #", 1)[1].split()[0])
            self.tally.latencies.append(time.perf_counter() - started)
            self.tally.changed.notify_all()
        return True

    def _client(self, client: int) -> None:
        for edit in range(self.edits):
            for _attempt in range(3):  # an edit that died with the server is sent again after the restart
                self.up.wait(600)
                try:
                    self._one_edit(client, edit)
                    break
                except Exception as error:  # noqa: BLE001 - counted below, the client goes on
                    with self.tally.lock:
                        self.tally.failures.append(f"client {client} edit {edit}: {type(error).__name__}: {error}"[:300])
                    time.sleep(1.0)

    def _kill_and_restart(self) -> None:
        half = max(1, self.clients * self.edits // 2)
        with self.tally.changed:
            self.tally.changed.wait_for(lambda: len(self.tally.finished) >= half, timeout=900)
        self.up.clear()
        self.running_at_kill = running_edits(self.server.db_path)  # kill while a run is in flight, if one comes
        self.killed_at = len(self.tally.finished)
        self.server.kill()
        self.server.start()
        self.up.set()

    def run(self) -> float:
        started = time.perf_counter()
        threads = [threading.Thread(target=self._client, args=(c,), daemon=True) for c in range(self.clients)]
        if self.kill_restart:
            threads.append(threading.Thread(target=self._kill_and_restart, daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(1800)
        return time.perf_counter() - started


def running_edits(db_path: Path, wait: float = 20.0) -> list[int]:
    """Ids of edits stored as running, polled until one shows up (or `wait` seconds pass)."""
    deadline = time.monotonic() + wait
    while True:
        connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
        try:
            ids = [r[0] for r in connection.execute("select id from edits where stop_reason = 'running'")]
        finally:
            connection.close()
        if ids or time.monotonic() > deadline:
            return ids
        time.sleep(0.01)


def verify(db_path: Path, finished: dict[tuple[int, int], int], attempts: dict[tuple[int, int], int],
           running_at_kill: list[int]) -> dict[str, object]:
    """What the database holds for the edits reported finished (opened read-only with plain sqlite3)."""
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        integrity = connection.execute("PRAGMA integrity_check").fetchone()[0]
        rows = {r[0]: r[1:] for r in connection.execute("select id, input, output, stop_reason from edits")}
        states_at_kill = [rows[i][2] for i in running_at_kill if i in rows]
        interrupted = sum(1 for r in rows.values() if r[2] == "interrupted")
        running = sum(1 for r in rows.values() if r[2] == "running")
    finally:
        connection.close()
    lost = wrong = duplicated = 0
    for (client, edit), edit_id in finished.items():
        source, target = case(client, edit)
        row = rows.get(edit_id)
        if row is None:
            lost += 1
            continue
        if row[1] != target or row[2] not in ("complete", "eos"):
            wrong += 1
        # more rows for this request than the client sent it (a retry after the kill is a new request)
        copies = sum(1 for r in rows.values() if r[0] == source)
        duplicated += copies > attempts.get((client, edit), 1)
    return {"integrity": integrity, "lost": lost, "wrong": wrong, "duplicated": duplicated,
            "interrupted": interrupted, "left_running": running, "edits_stored": len(rows),
            "states_of_runs_in_flight_at_kill": states_at_kill}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))], 3)


def run_loadtest(clients: int, edits: int, *, kill_restart: bool, model: str = MODEL,
                 folder: Path | None = None) -> dict[str, object]:
    folder = folder or Path(tempfile.mkdtemp(prefix="copy-as-decode-loadtest-"))
    server = Server(folder, clients, model)
    server.start()
    harness = Harness(server, clients, edits, kill_restart)
    try:
        wall = harness.run()
    finally:
        server.stop()
    checks = verify(server.db_path, harness.tally.finished, harness.tally.attempts, harness.running_at_kill)
    latencies = harness.tally.latencies
    return {
        "clients": clients, "edits_per_client": edits, "edits_finished": len(harness.tally.finished),
        "edits_stored": checks["edits_stored"], "lost": checks["lost"], "duplicated": checks["duplicated"],
        "wrong": checks["wrong"], "integrity": checks["integrity"], "interrupted": checks["interrupted"],
        "left_running": checks["left_running"], "killed_after": harness.killed_at,
        "in_flight_at_kill": checks["states_of_runs_in_flight_at_kill"], "server_starts": server.starts,
        "client_errors": len(harness.tally.failures), "wall_s": round(wall, 2),
        "p50_s": round(statistics.median(latencies), 3) if latencies else None, "p95_s": percentile(latencies, 0.95),
        "folder": str(folder), "first_errors": harness.tally.failures[:3],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app loadtest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent API clients (default 16)")
    parser.add_argument("--edits", type=int, default=3, help="reference edits per client (default 3)")
    parser.add_argument("--kill-restart", action="store_true", help="SIGKILL the server half-way and start it again")
    parser.add_argument("--model", default=MODEL, help=f"models.yaml entry (default {MODEL})")
    parser.add_argument("--keep", action="store_true", help="keep the server logs and database (else removed)")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.edits < 1:
        print("error: --clients and --edits must be at least 1", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="copy-as-decode-loadtest-"))
    try:
        report = run_loadtest(args.clients, args.edits, kill_restart=args.kill_restart, model=args.model, folder=folder)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    for key, value in report.items():
        if key != "first_errors":
            print(f"{key:>18}  {value}")
    first_errors: list[str] = report["first_errors"]  # type: ignore[assignment]
    for line in first_errors:
        print(f"  client error: {line}")
    keys = ("clients", "edits_finished", "edits_stored", "lost", "duplicated", "wrong", "integrity",
            "interrupted", "p50_s", "p95_s")
    print(json.dumps({k: report[k] for k in keys}))
    ok = report["lost"] == report["duplicated"] == report["wrong"] == 0 and report["integrity"] == "ok"
    return 0 if ok and report["left_running"] == 0 else 1
