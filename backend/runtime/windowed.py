"""Edits of inputs longer than the model's context, through a window of them (backend/core/window.py).

The engine prepares the window's edit like any other (its own prompt, its own length check) and
runs it; here the window's events and result are put back into the whole input. The lines before
the window stream first as one copy event, the lines after it last; copy tags are renumbered to
the input's lines (a tag's events are held until the tag is whole, a few tokens); the result's
output is the whole input with the window edited, its program the whole input's program, and
`metrics.window` says which lines the model saw. Timings and token counts are the window's edit:
the lines outside it cost no forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from backend.core.window import SourceWindow, renumber_copies, widen_program
from backend.runtime.events import DecodeEvent, DecodeResult


def line_costs(encode: Callable[[str], list[int]], lines: Sequence[str]) -> list[int]:
    """Tokens each line takes in a copy-as-decode context: once in the prompt behind its number
    ("123| ", about 3 tokens) and once more in the cache when it is copied (or rewritten)."""
    return [2 * len(encode(line)) + 3 for line in lines]


def widened_events(events: Iterator[DecodeEvent], window: SourceWindow, lines: Sequence[str]) -> Iterator[DecodeEvent]:
    """The window edit's `events` as events of an edit of the whole input."""
    before, _, after = window.split(lines)
    if before:
        yield DecodeEvent("copy", before, 0, 0, 0.0)
    tags: list[DecodeEvent] = []
    for event in events:
        if event.kind == "tag":
            tags.append(event)
            continue
        if tags:
            yield _renumbered(tags, window)
            tags = []
        if event.kind == "done" and event.result is not None:
            result = widen_result(event.result, window, lines)
            if after and _finished(event.result):
                yield DecodeEvent("copy", after, 0, event.forwards, event.elapsed)
            event = replace(event, result=result)
        yield event
    if tags:  # a stream that ended without a done event
        yield _renumbered(tags, window)


def _renumbered(tags: list[DecodeEvent], window: SourceWindow) -> DecodeEvent:
    """Consecutive tag events as one, its whole copy tags renumbered to the input's lines."""
    text = renumber_copies("".join(event.text for event in tags), window.offset)
    last = tags[-1]
    return replace(last, text=text, tokens=sum(event.tokens for event in tags))


def widen_result(result: DecodeResult, window: SourceWindow, lines: Sequence[str]) -> DecodeResult:
    """The window edit's result as the whole input's: the lines outside the window put back around
    its output (the lines after it only when the edit finished), its program renumbered."""
    before, _, after = window.split(lines)
    finished = _finished(result)
    resolved = result.stop_reason != "error" or bool(result.output)  # "" and an error: the resolver refused the program
    output = before + result.output + (after if finished else "") if resolved else ""
    program = None if result.program is None else widen_program(result.program, window, finished=finished)
    metrics = replace(result.metrics, window=window.describe(), copied_rest=_shifted(result.metrics.copied_rest, window))
    return replace(result, output=output, program=program, metrics=metrics)


def _finished(result: DecodeResult) -> bool:
    """Whether the window's edit ended as it should (then the lines after the window follow it)."""
    return not result.partial and result.stop_reason != "error"


def _shifted(span: str | None, window: SourceWindow) -> str | None:
    if not span:
        return span
    first, last = (int(part) + window.offset for part in span.split("-"))
    return f"{first}-{last}"
