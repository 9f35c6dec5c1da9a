"""Type checking runs with the tests (so CI runs it): mypy, configured in pyproject.toml.

backend/core (the pure algorithm) is checked with --strict; backend/runtime and backend/training
(and what they import) and app/ (the UI layer) with pyproject's settings. A type error fails the suite
with mypy's own report.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.parametrize("args", [("--strict", "backend/core"), ("backend/runtime", "backend/training"), ("app",)],
                         ids=["core-strict", "runtime-training", "app"])
def test_mypy_passes(args):
    done = _mypy(*args)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


def test_mypy_sees_a_type_error(tmp_path):
    # the check can fail: the same configuration on a file with an error
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n", encoding="utf-8")
    done = _mypy("--strict", str(bad))
    assert done.returncode == 1 and "Incompatible return value type" in done.stdout
