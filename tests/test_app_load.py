"""The load-and-fault test (issue 12): a real `python -m app` server on loopback with a real SQLite
file, concurrent API clients doing reference edits, one SIGKILL and restart in the middle.

Small for CI on 2 cores (4 clients x 2 edits); `python -m app loadtest --clients 16 --edits 3
--kill-restart` runs the same harness at full scale.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.loadtest import REPO, case, run_loadtest

pytestmark = pytest.mark.slow


def test_cases_are_distinct_and_each_changes_one_line():
    pairs = {case(c, e) for c in range(4) for e in range(3)}
    assert len(pairs) == 12
    source, target = case(1, 2)
    assert sum(a != b for a, b in zip(source.splitlines(), target.splitlines())) == 1


def test_every_finished_edit_survives_a_kill_exactly_once(tmp_path):
    report = run_loadtest(4, 2, kill_restart=True, folder=tmp_path)
    assert report["server_starts"] == 2 and report["killed_after"] >= 1, report
    assert report["edits_finished"] == 8, report  # every client got every edit through, retrying after the kill
    assert (report["lost"], report["duplicated"], report["wrong"]) == (0, 0, 0), report
    assert report["integrity"] == "ok" and report["left_running"] == 0, report
    # a run the kill caught mid-way is stored as interrupted (or had just finished), never left running
    assert all(state in ("interrupted", "complete", "eos") for state in report["in_flight_at_kill"]), report
    assert report["interrupted"] == report["in_flight_at_kill"].count("interrupted")


def test_the_command_prints_its_figures_as_a_last_json_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "app", "loadtest", "--clients", "2", "--edits", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures) == {"clients", "edits_finished", "edits_stored", "lost", "duplicated", "wrong", "integrity",
                            "interrupted", "p50_s", "p95_s"}
    assert figures["clients"] == 2 and figures["edits_finished"] == 2 and figures["lost"] == 0
    assert subprocess.run([sys.executable, "-m", "app", "loadtest", "--clients", "0"], cwd=REPO,
                          capture_output=True, timeout=60).returncode == 2
