"""A windowed edit the model ran away in is tried once more, in a window the size it was trained on.

An input over the model's context is edited through the largest window of it that fits
(backend/core/window.py): a few hundred lines of a long file. The shipped model was trained on
windows of 20-200 lines, and in some larger ones it stops editing and rewrites the window line by
line, a short copy and a one-line gen in turn, until the token limit (3 of the 100 held-out commits,
docs/results.md). Capping every window at 200 lines cures those and gives the same failure to
others that finish in the large window, so the cap is a second try, not the rule: when the first
program ends at the token limit or in a loop, and a window of at most TRAINED_WINDOW_LINES lines
holds what the instruction names, the edit runs again there. The consumer is told with a "restart"
event (what it has shown is void); the result carries what the first try cost (`retry_seconds`)
and why it was abandoned (`window_retry`). A program that finished, or was cancelled, is never
re-run, so this changes no finished edit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from backend.core.lines import split_lines
from backend.core.window import TRAINED_WINDOW_LINES
from backend.runtime.events import DecodeEvent, DecodeResult
from backend.runtime.request import EditError
from backend.runtime.windowed import widened_events

RAN_AWAY = ("max_tokens", "loop")  # stops that end a program unfinished by the model's own choices
_WHY = {"max_tokens": "reached the token limit", "loop": "repeated itself"}


def ran_away(result: DecodeResult | None) -> bool:
    """Whether a window's program ended unfinished by the model's choices (not cancelled, not refused)."""
    return result is not None and result.partial and result.stop_reason in RAN_AWAY


def windowed_events(engine: Any, prepared: Any, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
    """The events of `prepared` (a PreparedEdit with `inner` and `window` set) on `engine` (an
    EditEngine): its window's edit put back into the whole input, tried once more in a window of at
    most TRAINED_WINDOW_LINES lines when the model ran away in a larger one."""
    lines = split_lines(prepared.request.source)
    ended: DecodeEvent | None = None
    for event in widened_events(engine.decode_prepared(prepared.inner, cancel), prepared.window, lines):
        if event.kind == "done" and ran_away(event.result):
            ended = event
            break
        yield event
    if ended is None:
        return
    narrow = _narrower(engine, prepared)
    if narrow is None:
        yield ended
        return
    assert ended.result is not None
    first = ended.result
    note = retry_note(first, narrow.window.describe())
    yield DecodeEvent("restart", note, 0, 0, 0.0)
    spent = first.metrics.wall_seconds + first.metrics.prefill_seconds
    second = widened_events(engine.decode_prepared(narrow.inner, cancel), narrow.window, lines)
    yield from _marked(second, note, spent)


def retry_note(first: DecodeResult, second_window: str) -> str:
    """Why the first window's edit was abandoned and where it runs again, in plain words."""
    why = _WHY.get(first.stop_reason, first.stop_reason)
    return (f"in {first.metrics.window} the model's program {why} without finishing the edit, so it was run again "
            f"in {second_window}, a window the size the model was trained on")


def _narrower(engine: Any, prepared: Any) -> Any:
    """The same request prepared in a window of at most TRAINED_WINDOW_LINES lines, or None when the
    first window was no larger, no such window holds what the instruction names, or it is the same."""
    window = prepared.window
    if window.end - window.start + 1 <= TRAINED_WINDOW_LINES:
        return None
    try:
        narrow = engine.prepare_window(prepared.request, max_lines=TRAINED_WINDOW_LINES)
    except EditError:
        return None
    return narrow if narrow.window != window else None


def _marked(events: Iterator[DecodeEvent], note: str, spent: float) -> Iterator[DecodeEvent]:
    """`events` with the done event's metrics saying the edit is a second try and what the first cost."""
    for event in events:
        if event.kind == "done" and event.result is not None:
            metrics = replace(event.result.metrics, window_retry=note, retry_seconds=spent)
            event = replace(event, result=replace(event.result, metrics=metrics))
        yield event

