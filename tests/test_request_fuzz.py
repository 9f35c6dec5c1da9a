"""Fuzz over every entry point of an edit (issue 12 item 9): the request contract, the app's
service, its Edit tab, storage and the command line. Whatever comes in, the answer is a valid
request or one clear line saying what to change: never a traceback, never a truncated number."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.service import AppConfig, AppService, RunRequest
from backend.runtime.request import APP_LIMITS, EditError, EditRequest, check_request
from backend.storage import NewEdit, Storage, StorageError

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
TEXTS = st.one_of(
    st.text(max_size=40),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=10), SURROGATES, st.text(max_size=10)),
    st.sampled_from(["", " ", "\x00", "a\r\nb", "\r", "x" * 25_000]),
)
NUMBERS = st.one_of(
    st.integers(-10, 10**7), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=5), st.sampled_from([math.nan, math.inf, -math.inf, 12.5, 64.0, 0, -1]),
)
ANYTHING = st.one_of(TEXTS, NUMBERS, st.lists(st.integers(), max_size=2))


def _one_line(error: Exception) -> None:
    message = str(error)
    assert message and "\n" not in message and "Traceback" not in message, message


def _valid(request: EditRequest) -> None:
    request.source.encode("utf-8")
    assert type(request.max_new_tokens) is int and 1 <= request.max_new_tokens <= APP_LIMITS.max_new_tokens
    assert math.isfinite(request.temperature) and 0 < request.top_p <= 1


@settings(max_examples=400, deadline=None)
@given(source=ANYTHING, instruction=ANYTHING, target=ANYTHING, tokens=NUMBERS, temperature=NUMBERS, top_p=NUMBERS,
       mode=st.sampled_from(["model", "reference", "oracle", 3]), strategy=st.sampled_from(["cad", "ar", "pld", "x"]))
def test_check_request_answers_a_request_or_one_line(source, instruction, target, tokens, temperature, top_p, mode,
                                                     strategy):
    try:
        request = check_request(source, instruction, strategy=strategy, mode=mode, target=target,
                                max_new_tokens=tokens, temperature=temperature, top_p=top_p, limits=APP_LIMITS)
    except EditError as error:
        _one_line(error)
        return
    _valid(request)
    if isinstance(tokens, float):
        assert tokens == request.max_new_tokens  # a whole float is taken, anything else refused


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    app_service = AppService(AppConfig(model="tiny-random", db_url=str(folder / "fuzz.sqlite3"), include_random=True,
                                       limits=replace(APP_LIMITS, max_new_tokens=64)))
    assert app_service.wait_until_ready("tiny-random", timeout=300).ready
    yield app_service
    app_service.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=TEXTS, instruction=TEXTS, target=TEXTS, tokens=NUMBERS)
def test_the_app_prepares_or_says_why_in_one_line(service, source, instruction, target, tokens):
    """prepare() = the contract + the engine's tokenisation and context check, nothing run or stored."""
    before = service.storage.count_sessions()
    for mode in ("model", "reference"):
        try:
            run = service.prepare(RunRequest("tiny-random", source, instruction, mode=mode, target=target,
                                             max_new_tokens=tokens))
        except EditError as error:
            _one_line(error)
            continue
        _valid(run.request)
        assert run.prepared.prompt_ids and run.prepared.request is run.request
    assert service.storage.count_sessions() == before


@pytest.mark.parametrize("field, value", [
    ("source", "def f():\ud800\n"), ("instruction", "rename\udfff"), ("target", "x\udc00\n"), ("tokens", math.nan),
    ("tokens", 12.5), ("tokens", math.inf),
])
def test_the_edit_tab_answers_bad_fields_in_its_status(service, field, value):
    from app.ui import build_app

    edit = build_app(service).edit
    fields = {"source": "a\n", "instruction": "x", "target": "b\n", "tokens": 16}
    fields[field] = value
    updates = list(edit.run("tiny-random", fields["source"], fields["instruction"], "reference", fields["target"],
                            fields["tokens"], request=SimpleNamespace(session_hash="fuzz")))
    assert len(updates) == 1
    status = updates[0][edit.status]
    assert ("not valid Unicode" in status) or ("whole number" in status), status
    assert "\n" not in status


@pytest.mark.parametrize("field", ["title", "note", "annotator"])
def test_storage_refuses_a_lone_surrogate_in_one_line(tmp_path, field):
    store = Storage(str(tmp_path / "s.sqlite3"))
    try:
        session = store.create_session(kind="edit", model="m", mode="model")
        edit = store.add_edit(session.id, NewEdit(input="a", instruction="", output="", strategy="cad", model="m",
                                                  mode="model"))
        with pytest.raises(StorageError, match="not valid Unicode") as caught:
            if field == "title":
                store.create_session(kind="edit", model="m", mode="model", title="t\ud800")
            else:
                store.save_annotation(edit_id=edit.id, annotator="a\ud800" if field == "annotator" else "a",
                                      label="wrong", note="n\ud800" if field == "note" else "")
        _one_line(caught.value)
        assert store.count_sessions() == 1 and store.annotations() == []
    finally:
        store.close()


def _cli(*args: str, tmp_path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "backend", *args], cwd=REPO_ROOT, capture_output=True, timeout=300)
    # bytes in, decoded here: text=True would turn the CRLF this test checks into LF
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode("utf-8"),
                                       done.stderr.decode("utf-8"))


def test_the_cli_refuses_unreadable_or_endless_files_in_one_line(tmp_path):
    crlf_source = tmp_path / "source.txt"
    crlf_source.write_bytes(b"a\r\nb\r\n")
    crlf_program = tmp_path / "program.txt"
    crlf_program.write_bytes(b'<copy lines="1-1"/>\r\n<gen>c\r\n</gen>\r\n')
    done = _cli("resolve", "--source", str(crlf_source), "--program", str(crlf_program), tmp_path=tmp_path)
    assert done.returncode == 0 and done.stdout == "a\r\nc\r\n", done.stderr  # CRLF program file accepted
    endless = _cli("resolve", "--source", "/dev/zero", "--program", str(crlf_program), tmp_path=tmp_path)
    assert endless.returncode == 2 and "larger than 16,777,216 bytes" in endless.stderr
    assert len(endless.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    (["--temperature", "nan"], "temperature must be a finite number, not nan"),
    (["--temperature", "inf"], "temperature must be a finite number, not inf"),
    (["--top-p", "nan"], "top-p must be a finite number"),
    (["--empty-source"], "the input is empty"),
])
def test_the_cli_edit_refuses_what_the_app_refuses(tmp_path, extra, message):
    source = tmp_path / "source.py"
    source.write_text("" if "--empty-source" in extra else "x = 1\n")
    args = [a for a in extra if a != "--empty-source"]
    done = _cli("edit", "--model", "tiny-random", "--source", str(source), "--instruction", "Set x to 2.", *args,
                tmp_path=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-500:])
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
