"""End to end through the API: `python -m app` as a subprocess on a free loopback port, a temp SQLite
file, gradio_client as the caller; the streamed result is read and the stored row checked in the file."""

from __future__ import annotations

import json
import sqlite3

import pytest
from app_fixtures import TEST_MODEL, running_app
from gradio_client import Client

pytestmark = pytest.mark.slow

SOURCE = (
    "def area(width, height):\n"
    '    """Area of a rectangle: width times height, both in metres, as a float."""\n'
    "    result = float(width) * float(height)\n"
    "    assert result >= 0, 'negative sizes are not rectangles'\n"
    "    return result\n"
    "\n"
    "print(area(2, 3))\n"
)
TARGET = SOURCE.replace("print(area(2, 3))", "print(area(4, 5))")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("e2e")) as app_server:
        yield app_server


def test_edit_over_the_api_streams_and_stores_the_row(server):
    client = Client(server.url, verbose=False)
    job = client.submit(TEST_MODEL, SOURCE, "Print the area of a 4 by 5 rectangle.", "reference", TARGET, 256,
                        api_name="/edit")
    final = job.result(timeout=120)
    updates = job.outputs()
    assert len(updates) >= 2, "the edit should stream more than one update"
    stream, program, output, diff = final[0], final[1], final[2], final[3]
    status = final[-1]
    assert output == TARGET
    assert {item["class_or_confidence"] for item in stream} >= {"copy", "gen"}
    assert program.startswith(("<copy", "<gen>")) and "+print(area(4, 5))" in diff
    assert "saved as edit #" in status, status
    edit_id = int(status.split("saved as edit #", 1)[1].split()[0])

    connection = sqlite3.connect(server.db_path)
    row = connection.execute(
        "select input, output, program, strategy, model, mode, partial, metrics, events from edits where id = ?",
        (edit_id,),
    ).fetchone()
    sessions = connection.execute("select kind, model, mode from sessions").fetchall()
    connection.close()
    assert row[:2] == (SOURCE, TARGET) and row[3:7] == ("cad", TEST_MODEL, "reference", 0)
    assert row[2].rstrip("\n") == program.rstrip("\n")  # the Code component drops a final newline
    assert json.loads(row[7])["forwards"] > 0
    assert json.loads(row[8])["tokens"]["copy"] > 0
    assert ("edit", TEST_MODEL, "reference") in sessions


def test_api_rejects_bad_input_with_a_message(server):
    client = Client(server.url, verbose=False)
    final = client.predict(TEST_MODEL, "", "x", "model", "", 16, api_name="/edit")
    assert final[-1] == "the input is empty: paste text or upload a file"
    final = client.predict(TEST_MODEL, "a\n", " ", "model", "", 16, api_name="/edit")
    assert final[-1].startswith("write an instruction")
    with pytest.raises(Exception, match="greater than maximum value"):  # the slider's own bound
        client.predict(TEST_MODEL, "a\n", "x", "model", "", 99_999, api_name="/edit")


def test_model_status_reports_ready(server):
    status = Client(server.url, verbose=False).predict(TEST_MODEL, api_name="/model_status")
    assert status.startswith(f"ready: {TEST_MODEL} on torch, cpu")


def test_only_deliberate_endpoints_answer_by_name(server):
    """Issue 12 item 1: UI plumbing (delete, export, import...) was callable as /run_once_21 etc."""
    client = Client(server.url, verbose=False)
    named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert sorted(named) == ["/annotate", "/annotation_queue", "/cancel", "/compare", "/edit", "/model_status"]
    for name in ("/run_once_21", "/lambda", "/pick_row", "/delete"):
        with pytest.raises(Exception):
            client.predict(1, api_name=name)


def _raw_call(server, api_name: str, data: list) -> list:
    """The HTTP API without gradio_client (which cannot even encode a lone surrogate): JSON with
    \\ud800 escapes, as any other client may send."""
    import urllib.request

    body = json.dumps({"data": data}).encode("ascii")
    url = f"{server.url}gradio_api/call/{api_name}"
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        event_id = json.loads(response.read())["event_id"]
    with urllib.request.urlopen(f"{url}/{event_id}", timeout=120) as response:
        lines = response.read().decode("utf-8").splitlines()
    payloads = [line[len("data: "):] for line in lines if line.startswith("data: ")]
    return json.loads(payloads[-1])


def test_api_refuses_a_lone_surrogate_and_a_fractional_token_count(server):
    final = _raw_call(server, "edit", [TEST_MODEL, "a = 1\ud800\n", "x", "model", "", 16])
    assert final[-1].startswith("the input is not valid Unicode text: a lone surrogate U+D800"), final[-1]
    client = Client(server.url, verbose=False)
    final = client.predict(TEST_MODEL, "a = 1\n", "x", "model", "", 16.5, api_name="/edit")
    assert final[-1] == "max new tokens must be a whole number, not 16.5"


def test_the_server_starts_without_warnings_or_server_paths_on_the_page(server):
    log = server.log()
    assert "Expected 1 arguments" not in log and "UserWarning" not in log, log[-2000:]
    client = Client(server.url, verbose=False)
    status = client.predict(TEST_MODEL, api_name="/model_status")
    assert str(server.db_path) not in status
