"""The app as a user starts it: `python -m app` with no --runtime and the default model (the trained
adapter). On a machine without CUDA, with llama-cpp-python installed (`make test` builds it), the
runtime "auto" picks llama.cpp, the faster CPU runtime (docs/bench.md); the model edits by itself
(model mode: only the source and the instruction are given) and the result is stored.

The case is held out of training (a dev-split file of tests/fixtures/cad-dev-subset.jsonl); the
shipped adapter solves it exactly on both runtimes (`evaluate ... --runtime torch|llama.cpp`).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from app_fixtures import running_app
from gradio_client import Client

pytestmark = pytest.mark.slow

SUBSET = Path(__file__).resolve().parent / "fixtures" / "cad-dev-subset.jsonl"
CASE_ID = "dev/00011"  # delete_line


def _case() -> dict:
    cases = [json.loads(line) for line in SUBSET.read_text().splitlines()]
    return next(case for case in cases if case["id"] == CASE_ID)


@pytest.fixture(scope="module")
def default_app(tmp_path_factory):
    from backend.runtime.models import default_model_name

    model = default_model_name()
    with running_app(tmp_path_factory.mktemp("default-model"), model=model) as server:
        yield server, model


def test_auto_runtime_serves_the_default_model_on_llama_cpp(default_app):
    server, model = default_app
    status = Client(server.url, verbose=False).predict(model, api_name="/model_status")
    assert status.startswith(f"ready: {model} on llama.cpp, cpu"), status


def test_the_default_model_edits_by_itself_and_the_row_is_stored(default_app):
    server, model = default_app
    case = _case()
    client = Client(server.url, verbose=False)
    final = client.predict(model, case["source"], case["instruction"], "model", "", 400, api_name="/edit")
    program, output, status = final[1], final[2], final[-1]
    assert "saved as edit #" in status, status
    assert output == case["target"], program
    edit_id = int(status.split("saved as edit #", 1)[1].split()[0])
    connection = sqlite3.connect(server.db_path)
    row = connection.execute("select output, strategy, model, mode, partial from edits where id = ?", (edit_id,)).fetchone()
    connection.close()
    assert row == (case["target"], "cad", model, "model", 0)


def test_an_update_snippet_is_merged_by_the_aligner_and_the_status_says_so(default_app):
    """Fast-apply through the app: the snippet aligner places the snippet (backend/core/snippet_apply.py),
    the merge is replayed with copies as prefills, and the status says the model did not write it."""
    server, model = default_app
    cases = [json.loads(line) for line in SUBSET.read_text().splitlines()]
    case = next(c for c in cases if c["kind"] == "snippet")
    final = Client(server.url, verbose=False).predict(model, case["source"], case["instruction"], "model", "", 64,
                                                      api_name="/edit")
    program, output, status = final[1], final[2], final[-1]
    assert output == case["target"], program
    assert "written by the snippet aligner, not the model" in status and "saved as edit #" in status, status
    edit_id = int(status.split("saved as edit #", 1)[1].split()[0])
    connection = sqlite3.connect(server.db_path)
    metrics = json.loads(connection.execute("select metrics from edits where id = ?", (edit_id,)).fetchone()[0])
    connection.close()
    assert metrics["written_by"] == "snippet aligner"
