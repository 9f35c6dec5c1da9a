"""Load and fairness (issue 12 items 2-3): a bounded line for the model with the position shown,
cancel while waiting, and a per-run time budget. The line's logic on its own, then the Edit tab
against the real service (tiny-random, a real SQLite file)."""

from __future__ import annotations

import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest

from app.run_queue import Busy, RunQueue
from app.service import AppConfig, AppService
from app.ui import build_app
from backend.runtime.request import APP_LIMITS

MODEL = "tiny-random"


def test_the_line_is_first_come_first_served_and_bounded():
    queue = RunQueue(max_waiting=2)
    first, second, third = queue.join(), queue.join(), queue.join()
    assert [queue.ahead(t) for t in (first, second, third)] == [0, 1, 2]
    with pytest.raises(Busy, match="busy: 3 runs ahead of you \\(at most 2 may wait\\)"):
        queue.join()
    never = threading.Event()
    assert next(queue.waiting(third, cancel=never, every=0.01)) == 2
    queue.leave(first)
    queue.leave(first)  # idempotent
    assert [queue.ahead(t) for t in (second, third)] == [0, 1]
    assert list(queue.waiting(second, cancel=never)) == []  # its turn: nothing to wait for
    cancel = threading.Event()
    waiting = queue.waiting(third, cancel=cancel, every=0.01)
    assert next(waiting) == 1
    cancel.set()
    assert list(waiting) == []  # a cancelled wait ends; the caller leaves the line
    assert len(queue) == 2


def test_a_waiter_is_admitted_when_the_run_ahead_leaves():
    queue = RunQueue(max_waiting=4)
    running, waiter = queue.join(), queue.join()
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.extend(queue.waiting(waiter, cancel=threading.Event(), every=5)))
    thread.start()
    threading.Timer(0.2, queue.leave, args=(running,)).start()
    thread.join(3)  # woken by leave(), not by the 5 s poll
    assert not thread.is_alive() and seen == [1] and queue.ahead(waiter) == 0


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("queue")
    config = AppConfig(model=MODEL, db_url=str(folder / "queue.sqlite3"), include_random=True, update_interval_s=0.02,
                       limits=replace(APP_LIMITS, max_new_tokens=2_000), max_waiting=1, run_seconds=0.3)
    app_service = AppService(config)
    assert app_service.wait_until_ready(MODEL, timeout=300).ready
    yield app_service
    app_service.close()


@pytest.fixture(scope="module")
def edit(service):
    return build_app(service).edit


def _browser(key: str) -> SimpleNamespace:
    return SimpleNamespace(session_hash=key)


def test_waiting_shows_the_position_and_cancel_leaves_without_running(edit, service):
    held = service.queue.join()  # someone else's run holds the model
    try:
        before = service.storage.count_sessions()
        runs = edit.run(MODEL, "a\nb\n", "x", "reference", "a\nc\n", 50, request=_browser("waiter"))
        assert next(runs)[edit.status] == "waiting for the model: 1 run ahead of you · Cancel leaves the line"
        # the line is full now (1 waiting): a third user is told at once
        (busy,) = list(edit.run(MODEL, "a\n", "x", "reference", "b\n", 50, request=_browser("third")))
        assert busy[edit.status].startswith("busy: 2 runs ahead of you")
        assert edit.cancel(request=_browser("waiter"))[edit.status].startswith("cancelling")
        last = list(runs)[-1]
        assert last[edit.status] == "cancelled while waiting for the model: nothing ran, nothing was stored"
        assert service.storage.count_sessions() == before and len(service.queue) == 1
    finally:
        service.queue.leave(held)


def test_a_run_over_its_time_budget_stops_as_a_plain_failure(edit, service):
    # reference mode with all-new text: ~300 generated tokens cannot finish in 0.3 s, whatever the
    # trained model would choose to write (it may end a model-mode program at once)
    target = "".join(f"y{i} = {i * 7}\n" for i in range(60))
    updates = list(edit.run(MODEL, "x = 1\n" * 30, "Rewrite everything.", "reference", target, 2_000,
                            request=_browser("slow")))
    status = updates[-1][edit.status]
    assert status.startswith("FAILED: the run reached the time limit before the model finished (0.3 s)"), status
    assert "what it produced is kept, marked partial" in status
    edit_id = int(status.split("saved as edit #", 1)[1].split()[0])
    stored = service.storage.get_edit(edit_id)
    assert stored.stop_reason == "time_limit" and stored.partial
    assert len(service.queue) == 0  # the turn was given back
