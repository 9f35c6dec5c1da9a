"""Who may reach the app (issue 12 item 1): loopback open, anything else needs a login or a loud
opt-out; only deliberate endpoints are callable by name; a login really guards a real server."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from app_fixtures import REPO, free_port

from app.security import AUTH_ENV, AccessError, is_loopback, resolve_access

# host, environment, auth file text, insecure flag -> credentials, warning?, error fragment
ACCESS_TABLE = [
    ("127.0.0.1", {}, None, False, (), False, None),
    ("localhost", {}, None, False, (), False, None),
    ("::1", {}, None, False, (), False, None),
    ("0.0.0.0", {}, None, False, None, False, "serves beyond this machine"),
    ("192.168.1.5", {}, None, False, None, False, "COPY_AS_DECODE_AUTH"),
    ("myhost.example", {}, None, False, None, False, "--auth-file"),
    ("0.0.0.0", {AUTH_ENV: "ann:s3cret, bob:pw:with:colons"}, None, False,
     (("ann", "s3cret"), ("bob", "pw:with:colons")), False, None),
    ("0.0.0.0", {}, "# team\nann:s3cret\n\n", False, (("ann", "s3cret"),), False, None),
    ("0.0.0.0", {}, "just-a-name\n", False, None, False, "entry 1 is not user:password"),
    ("0.0.0.0", {AUTH_ENV: " "}, None, True, (), True, None),
]


@pytest.mark.parametrize("host, environ, file_text, insecure, credentials, warns, error", ACCESS_TABLE)
def test_access__host__environ__file__insecure(tmp_path, host, environ, file_text, insecure, credentials, warns, error):
    auth_file = None
    if file_text is not None:
        auth_file = tmp_path / "users.txt"
        auth_file.write_text(file_text)
    if error:
        with pytest.raises(AccessError, match=error):
            resolve_access(host, auth_file=auth_file and str(auth_file), insecure_no_auth=insecure, environ=environ)
        return
    access = resolve_access(host, auth_file=auth_file and str(auth_file), insecure_no_auth=insecure, environ=environ)
    assert access.credentials == credentials
    assert (access.warning is not None) == warns
    if warns:
        assert "WITHOUT A LOGIN" in access.warning


def test_loopback_detection():
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and not is_loopback("0.0.0.0")


def test_serving_beyond_loopback_without_a_login_refuses_to_start():
    env = {k: v for k, v in os.environ.items() if k != AUTH_ENV}
    done = subprocess.run([sys.executable, "-m", "app", "--host", "0.0.0.0", "--port", str(free_port())],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: --host 0.0.0.0 serves beyond this machine")
    assert len(done.stderr.strip().splitlines()) == 1


def test_only_deliberate_endpoints_are_named(tmp_path):
    from app.service import AppConfig, AppService
    from app.ui import build_app

    service = AppService(AppConfig(model="tiny-random", db_url=str(tmp_path / "api.sqlite3"), include_random=True))
    try:
        info = build_app(service).demo.get_api_info()
    finally:
        service.close()
    assert sorted(info["named_endpoints"]) == [
        "/annotate", "/annotation_queue", "/cancel", "/compare", "/edit", "/model_status",
    ]
    assert not info.get("unnamed_endpoints")


@contextlib.contextmanager
def _server(*args: str, env: dict[str, str]):
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        log = open(os.path.join(folder, "log"), "w")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "--port", str(port), "--model", "tiny-random", "--include-random",
             "--db-url", os.path.join(folder, "db.sqlite3"), *args],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            yield f"http://127.0.0.1:{port}/", process, os.path.join(folder, "log")
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
            log.close()


def _status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow
def test_a_login_guards_the_api_of_a_real_server(tmp_path):
    users = tmp_path / "users.txt"
    users.write_text("ann:s3cret\n")
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "NO_PROXY": "127.0.0.1"}
    env.pop(AUTH_ENV, None)
    with _server("--host", "127.0.0.1", "--auth-file", str(users), env=env) as (url, process, log):
        deadline = time.monotonic() + 120
        code = None
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(OSError):
                code = _status_of(url + "config")
                break
            time.sleep(0.3)
        assert code == 401, (code, open(log).read())  # the app's config (and API) is refused without a login
        from gradio_client import Client

        with pytest.raises(Exception):
            Client(url, verbose=False)
        status = Client(url, auth=("ann", "s3cret"), verbose=False).predict("tiny-random", api_name="/model_status")
        assert "tiny-random" in status
