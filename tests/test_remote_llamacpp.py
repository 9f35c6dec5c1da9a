"""The remote engine for real: llama-cpp-python's server on loopback with the embedded GGUF.

The server is started here (`python -m backend serve-llamacpp`, which execs `llama_cpp.server`), the client speaks HTTP to it; the same
model in-process (llama.cpp runtime) is the reference for greedy plain decoding.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from backend.core.program import CopyLines, parse_program
from backend.core.resolve import resolve_program
from backend.runtime.models import get_spec, gguf_path
from backend.runtime.remote_client import CompletionsClient
from backend.runtime.remote_engine import RemoteEditEngine
from backend.runtime.request import EditError

SOURCE = (
    "import math\n"
    "\n"
    "def area(radius):\n"
    "    return 3.14 * radius * radius\n"
    "\n"
    "print(area(2))\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    port = _free_port()
    log = Path(tmp_path_factory.mktemp("llama-server")) / "server.log"
    # our launcher (`serve-llamacpp`): llama_cpp.server on the entry's GGUF, exec'd in this process
    command = [sys.executable, "-m", "backend", "serve-llamacpp", "--model", "smollm2-135m", "--port", str(port),
               "--n-ctx", "4096"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    yield url
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def engine(server_url: str) -> RemoteEditEngine:
    return RemoteEditEngine(CompletionsClient(server_url, "llamacpp"), model="smollm2-135m")


def test_cad_through_the_server__a_valid_program_streamed_as_events(engine: RemoteEditEngine) -> None:
    events = list(engine.run(SOURCE, "Use math.pi instead of 3.14.", strategy="cad", max_new_tokens=60))
    result = events[-1].result
    assert result is not None and result.strategy == "cad"
    assert result.stop_reason in ("eos", "max_tokens"), result.error
    ops = parse_program(result.program)
    assert result.output == resolve_program(ops, SOURCE)  # every copy in range, i <= j
    streamed_program = "".join(e.text for e in events if e.kind in ("tag", "gen"))
    # stopped inside a gen: its text so far is kept, unclosed. A gen's text may hold "<gen>" (the model
    # wrote it) but never "</gen>", so a "<gen>" after the last "</gen>" means the last gen is open
    if result.stop_reason == "max_tokens" and streamed_program.rfind("<gen>") > streamed_program.rfind("</gen>"):
        streamed_program += "</gen>"
    assert parse_program(streamed_program) == ops  # events carry the program exactly
    copies = [e.text for e in events if e.kind == "copy"]
    assert copies == [resolve_program([op], SOURCE) for op in ops if isinstance(op, CopyLines)]
    assert result.metrics.program_tokens <= 60 + 12  # bounded by max_new_tokens (counted by our tokenizer)
    assert result.metrics.forwards >= 1


def test_an_addressed_edit_through_the_server_keeps_its_shape(engine: RemoteEditEngine) -> None:
    """The untrained base model, which writes no usable program by itself: asked to change a literal on
    a named line, the client writes the copies and the server's grammar holds the one gen to the
    changed line (backend/runtime/remote_shape.py); a deletion needs no request at all."""
    changed = engine.run_to_result(SOURCE, "Change 3.14 to 3.1416 on line 4.", strategy="cad", max_new_tokens=60)
    assert changed.output == SOURCE.replace("3.14", "3.1416"), (changed.program, changed.error)
    assert changed.stop_reason == "eos" and changed.metrics.requests == 1
    deleted = engine.run_to_result(SOURCE, "Delete line 6.", strategy="cad", max_new_tokens=60)
    assert deleted.output == SOURCE.replace("print(area(2))\n", "") and deleted.metrics.requests == 0


def test_a_file_over_the_context_goes_to_the_server_as_a_window(engine: RemoteEditEngine) -> None:
    """The engine told the server holds 2,048 tokens (it holds 8,192): a 300-line file's literal
    change on line 250 is asked of the real server as one gen, in a window numbered from 1."""

    class SmallContext(RemoteEditEngine):
        context_length = 2048

    small = SmallContext(engine.client, model="smollm2-135m")
    lines = [f"value_{n} = {n} * 3.14\n" for n in range(1, 301)]
    source = "".join(lines)
    result = small.run_to_result(source, "Change 3.14 to 3.1416 on line 250.", strategy="cad", max_new_tokens=60)
    assert result.output == "".join(lines[:249] + ["value_250 = 250 * 3.1416\n"] + lines[250:]), result.error
    assert result.metrics.window is not None and result.metrics.requests == 1


def test_plain_through_the_server__equals_in_process_llamacpp_greedy(engine: RemoteEditEngine) -> None:
    from backend.runtime.engine import EditEngine
    from backend.runtime.llamacpp import load_llamacpp

    remote = engine.run_to_result(SOURCE, "Use math.pi instead of 3.14.", strategy="ar", max_new_tokens=24)
    local_handle = load_llamacpp("smollm2-135m", n_ctx=2048)
    try:
        local = EditEngine(local_handle).run_to_result(SOURCE, "Use math.pi instead of 3.14.", strategy="ar", max_new_tokens=24)
    finally:
        local_handle.close()
    assert remote.stop_reason in ("eos", "max_tokens") and remote.output
    assert remote.output == local.output  # same weights, same prompt text, greedy: same tokens


def test_remote_refuses_what_a_server_cannot_do(engine: RemoteEditEngine) -> None:
    with pytest.raises(EditError, match="prompt lookup is a server setting"):
        engine.validate(SOURCE, "x", strategy="pld")
    with pytest.raises(EditError, match="reference mode needs an in-process runtime"):
        engine.validate(SOURCE, "x", mode="reference", target=SOURCE)


def test_unreachable_server__error_in_the_result_not_a_crash() -> None:
    engine = RemoteEditEngine(CompletionsClient(f"http://127.0.0.1:{_free_port()}", "llamacpp"), model="smollm2-135m")
    result = engine.run_to_result(SOURCE, "Use math.pi.", strategy="cad", max_new_tokens=8)
    assert result.stop_reason == "error" and "cannot reach the llamacpp server" in result.error


@pytest.mark.parametrize("strategy", ["cad", "ar"])
def test_an_aligned_snippet_needs_no_server(strategy: str) -> None:
    """The snippet aligner's merge is streamed from its program: no request, so no server is needed
    (the port below has none); a snippet it will not place goes to the server (and fails here)."""
    engine = RemoteEditEngine(CompletionsClient(f"http://127.0.0.1:{_free_port()}", "llamacpp"), model="smollm2-135m")
    source = "".join(f"def step_{i}(x):\n    return x + {i}\n\n\n" for i in range(8))
    snippet = "Apply this update:\n```\n# ... existing code ...\ndef step_5(x):\n    return x * 5\n\n\ndef step_6(x):\n# ...\n```"
    events = list(engine.run(source, snippet, strategy=strategy, max_new_tokens=8))
    result = events[-1].result
    assert result.output == source.replace("return x + 5\n", "return x * 5\n") and result.stop_reason == "eos"
    assert result.metrics.written_by == "snippet aligner" and result.metrics.requests == 0
    assert "".join(e.text for e in events[:-1]) == result.output
    assert (result.program is not None) is (strategy == "cad")
    ambiguous = "Apply:\n```\n# ...\n    return x + 1\n    # checked\n# ...\n```"
    declined = engine.run_to_result(source + "def again(x):\n    return x + 1\n", ambiguous, strategy=strategy, max_new_tokens=8)
    assert declined.stop_reason == "error" and "more than one place" in declined.metrics.aligner_declined


def test_serve_command__adapter_entries_get_their_merged_gguf() -> None:
    from backend.cli.serve_command import server_command

    base = server_command("smollm2-135m", "127.0.0.1", 8080, None)
    assert base[1:4] == ["-m", "backend.runtime.llamacpp_server", "--model"] and base[4] == str(gguf_path(get_spec("smollm2-135m")))
    assert "--lora_path" not in base and base[base.index("--n_ctx") + 1] == "8192"
    adapter = server_command("smollm2-135m-cad", "127.0.0.1", 8080, 2048)
    # the adapter merged into a copy of the base GGUF: one model file, no run-time LoRA
    assert adapter[4] != base[4] and adapter[4].endswith("-merged-F16.gguf") and "--lora_path" not in adapter
    assert adapter[adapter.index("--model_alias") + 1] == "smollm2-135m-cad"
    from backend.__main__ import main

    assert main(["serve-llamacpp", "--model", "tiny-random", "--print"]) == 2  # no GGUF: a clear error
    assert main(["serve-llamacpp", "--port", "0", "--print"]) == 2


def test_evaluate_through_the_server__model_mode_with_request_counts(server_url: str, tmp_path: Path, capsys) -> None:
    """`evaluate --engine-url`: the model-mode evaluation runs against a server like in process."""
    from backend.__main__ import main

    corpus = tmp_path / "one.jsonl"
    corpus.write_text(json.dumps({"id": "c1", "source": SOURCE, "target": SOURCE.replace("3.14", "math.pi"),
                                  "instruction": "Use math.pi instead of 3.14."}) + "\n", encoding="utf-8")
    code = main(["evaluate", str(corpus), "--engine-url", server_url, "--engine-kind", "llamacpp",
                 "--model", "smollm2-135m", "--strategy", "ar", "--max-new-tokens", "48",
                 "--out", str(tmp_path / "not-yet" / "rows.jsonl")])
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "not-yet" / "rows.jsonl").read_text().splitlines()]
    assert [(row["corpus"], row["id"]) for row in rows] == [(str(corpus), "c1")]  # its folder made, one row per case
    document = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert document["runtime"] == "remote server"
    totals = document["corpora"][str(corpus)]["speed"]["totals"]
    assert totals["cad"]["requests"] >= 1 and totals["ar"]["requests"] == 1  # one request per item / one in all
