"""Waiting for the model's turn inside a streaming callback: position shown, cancel honoured."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from app.run_queue import Busy


class WaitForTurn:
    """Join the app's run queue. Iterate `updates()` for status lines while waiting; afterwards
    `admitted` is True, or `refusal` says why not (busy, or cancelled while waiting: nothing ran).
    Use as a context manager around the run: the turn is given up on exit, whatever happens."""

    def __init__(self, service: Any, cancel: threading.Event) -> None:
        self.queue = service.queue
        self.cancel = cancel
        self.ticket: int | None = None
        self.admitted = False
        self.refusal = ""

    def updates(self) -> Iterator[str]:
        try:
            self.ticket = self.queue.join()
        except Busy as error:
            self.refusal = str(error)
            return
        try:
            for ahead in self.queue.waiting(self.ticket, cancel=self.cancel):
                run_word = "run" if ahead == 1 else "runs"
                yield f"waiting for the model: {ahead} {run_word} ahead of you · Cancel leaves the line"
            if self.cancel.is_set():
                self.refusal = "cancelled while waiting for the model: nothing ran, nothing was stored"
            else:
                self.admitted = True
        finally:
            if not self.admitted:  # refused, cancelled, or the page went away while waiting
                self.queue.leave(self.ticket)

    def __enter__(self) -> WaitForTurn:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.ticket is not None:
            self.queue.leave(self.ticket)


def run_in_turn(
    service: Any, key: str, *, status: Any, cancel_button: Any,
    body: Callable[[threading.Event], Iterator[dict[Any, Any]]],
) -> Iterator[dict[Any, Any]]:
    """One browser session's run: a cancel flag for `key`, the wait for the model's turn shown in
    `status` (Cancel enabled), then `body(cancel)`; the turn and the flag are given back whatever
    happens (the page going away included)."""
    import gradio as gr

    cancel = service.begin_run(key)
    try:
        turn = WaitForTurn(service, cancel)
        for waiting in turn.updates():
            yield {status: waiting, cancel_button: gr.update(interactive=True)}
        if not turn.admitted:
            yield {status: turn.refusal, cancel_button: gr.update(interactive=False)}
            return
        with turn:
            yield from body(cancel)
    finally:
        service.end_run(key, cancel)
