"""What a running decode looks like so far: spans, counts, timeline, live metrics. Pure, thread-safe.

`RunTracker.add(event)` is fed every DecodeEvent by the thread running the engine; the UI thread
calls `snapshot()` at its own rate (the engine never waits on the browser). Anything with the
DecodeEvent fields (kind, text, tokens, forwards, elapsed, result) is accepted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from backend.runtime.prompt_lookup import lookup_label

SPAN_KINDS = ("copy", "gen", "tag", "draft")  # draft: prompt-lookup tokens drafted from the input and accepted
OUTPUT_KINDS = ("copy", "gen", "draft")
TIMELINE_POINTS = 240  # points kept in the stored event summary (the live chart keeps all)


@dataclass(frozen=True)
class Snapshot:
    strategy: str
    spans: tuple[tuple[str, str], ...]  # (text, kind) merged runs of the decode stream, tags included
    program: str                        # tags + generated text so far (cad), final program when done
    output: str                         # copied + generated text so far, the resolved output when done
    metrics: dict[str, Any]
    timeline: tuple[tuple[float, int], ...]  # (elapsed s, output tokens so far)
    done: bool = False
    result: Any = None                  # the DecodeResult once done
    first_span_seconds: float | None = None  # wall seconds from start() to the first non-tag span
    wall_seconds: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


MIN_OWN_STEPS = 5  # fewer one-token steps than this give no stable median: use the load-time step


class RunTracker:
    """Accumulates DecodeEvents of one strategy run. `step_seconds` prices plain decoding."""

    def __init__(self, strategy: str, *, step_seconds: float | None = None, lookup: tuple[int, int] | None = None) -> None:
        self.strategy = strategy
        self.step_seconds = step_seconds
        self.lookup = lookup  # prompt lookup's (n-gram, drafts): stored with the metrics, so Compare can tell runs apart
        self._lock = threading.Lock()
        self._clear_stream()
        self._started = time.perf_counter()
        self._result: Any = None
        self._error: str | None = None
        self._done = False
        self._restart_note: str | None = None  # why the stream started over (backend/runtime/window_retry.py)

    def _clear_stream(self) -> None:
        self._spans: list[list[str]] = []  # [text, kind]
        self._program: list[str] = []
        self._output: list[str] = []
        self._tokens = {kind: 0 for kind in SPAN_KINDS}
        self._events = {kind: 0 for kind in SPAN_KINDS}
        self._forwards = 0
        self._elapsed = 0.0
        self._timeline: list[tuple[float, int]] = [(0.0, 0)]
        self._first_span: float | None = None

    def restart_clock(self) -> None:
        self._started = time.perf_counter()

    def add(self, event: Any) -> None:
        with self._lock:
            kind = event.kind
            if kind == "restart":  # the engine starts the edit over: what was streamed is void
                self._clear_stream()
                self._restart_note = event.text
                return
            self._forwards = max(self._forwards, int(event.forwards))
            self._elapsed = max(self._elapsed, float(event.elapsed))
            if kind == "done":
                self._result = event.result
                self._done = True
                return
            if kind not in SPAN_KINDS:
                return
            self._tokens[kind] += int(event.tokens)
            self._events[kind] += 1
            text = event.text
            if text:
                if self._spans and self._spans[-1][1] == kind:
                    self._spans[-1][0] += text
                else:
                    self._spans.append([text, kind])
                if kind != "tag" and self._first_span is None:
                    self._first_span = time.perf_counter() - self._started
            if kind in ("tag", "gen"):
                self._program.append(text)
            if kind in OUTPUT_KINDS:
                self._output.append(text)
                self._timeline.append((self._elapsed, sum(self._tokens[k] for k in OUTPUT_KINDS)))

    def fail(self, message: str) -> None:
        with self._lock:
            self._error = message
            self._done = True

    # -- reading ---------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        with self._lock:
            result = self._result
            metrics = self._metrics(result)
            program = "".join(self._program)
            output = "".join(self._output)
            if result is not None:
                output = result.output
                program = result.program if result.program is not None else program
            return Snapshot(
                strategy=self.strategy,
                spans=tuple((text, kind) for text, kind in self._spans),
                program=program if self.strategy == "cad" else "",
                output=output,
                metrics=metrics,
                timeline=tuple(self._timeline),
                done=self._done,
                result=result,
                first_span_seconds=self._first_span,
                wall_seconds=time.perf_counter() - self._started,
                error=self._error or (getattr(result, "error", None) if result is not None else None),
            )

    def _metrics(self, result: Any) -> dict[str, Any]:
        final = result.metrics.to_dict() if result is not None else {}
        copied = int(final.get("tokens_copied", self._tokens["copy"]))
        # the model chose accepted drafts too: they count as generated, shown apart as "draft"
        generated = int(final.get("tokens_generated", self._tokens["gen"] + self._tokens["draft"]))
        tags = int(final.get("tokens_tag", self._tokens["tag"]))
        forwards = int(final.get("forwards", self._forwards))
        # a second try's speed-up pays for the first try too
        elapsed = float(final.get("wall_seconds", self._elapsed)) + float(final.get("retry_seconds") or 0.0)
        output_tokens = int(final.get("output_tokens", copied + generated))
        rate = final.get("tokens_per_second")
        if rate is None:
            rate = output_tokens / elapsed if elapsed > 0 else 0.0
        metrics: dict[str, Any] = {
            **final,
            "strategy": self.strategy,
            "elapsed_seconds": elapsed,
            "tokens_copied": copied,
            "tokens_generated": generated,
            "tokens_tag": tags,
            "forwards": forwards,
            "output_tokens": output_tokens,
            "tokens_per_second": float(rate),
        }
        if self._restart_note and not final:
            metrics["window_retry"] = self._restart_note
        if self.lookup is not None:
            metrics["lookup"] = lookup_label(self.lookup)
        step, basis = self._plain_step_price(final)
        if step:
            # Plain decoding pays one forward per output token (prefill excluded on both sides).
            plain = step * output_tokens
            metrics["step_seconds"] = step
            metrics["plain_estimate_basis"] = basis
            metrics["estimated_plain_seconds"] = plain
            metrics["speedup"] = plain / elapsed if elapsed > 0 and output_tokens else None
        return metrics

    def _plain_step_price(self, final: dict[str, Any]) -> tuple[float | None, str]:
        """Seconds one plain decode step costs, and what that number rests on.

        Preferably the median of this run's own one-token forwards: same machine, same moment, same
        load, so a server started under load no longer prices plain decoding at its start-up speed.
        The step timed once at model load is the fallback (while streaming, or a run of too few
        steps to take a median from)."""
        own, steps = final.get("decode_step_seconds"), int(final.get("decode_steps") or 0)
        if own and steps >= MIN_OWN_STEPS:
            return float(own), f"median of this run's {steps} one-token steps ({float(own) * 1000:.1f} ms)"
        if self.step_seconds:
            why = f"this run made {steps} one-token steps" if final else "the run is still going"
            return self.step_seconds, f"one step timed at model load ({self.step_seconds * 1000:.1f} ms; {why})"
        return None, ""

    def event_summary(self) -> dict[str, Any]:
        """What storage keeps of the stream: counts, first span, a thinned timeline and the spans."""
        with self._lock:
            timeline = _thin(self._timeline, TIMELINE_POINTS)
            return {
                "events": _present(self._events),
                "tokens": _present(self._tokens),
                "forwards": self._forwards,
                "first_span_seconds": self._first_span,
                "timeline": [[round(t, 4), n] for t, n in timeline],
                "spans": [[kind, text] for text, kind in self._spans],
            }


def _present(counts: dict[str, int]) -> dict[str, int]:
    """Counts per kind; "draft" only where prompt lookup produced some (older summaries lack it)."""
    return {kind: n for kind, n in counts.items() if n or kind != "draft"}


def _thin(points: list[tuple[float, int]], keep: int) -> list[tuple[float, int]]:
    if len(points) <= keep:
        return list(points)
    step = (len(points) - 1) / (keep - 1)
    return [points[round(i * step)] for i in range(keep)]


def merge_spans(pairs: list[tuple[str, str]] | list[list[str]]) -> list[tuple[str, str]]:
    """(text, kind) pairs with adjacent runs of one kind merged."""
    merged: list[list[str]] = []
    for text, kind in pairs:
        if merged and merged[-1][1] == kind:
            merged[-1][0] += text
        elif text:
            merged.append([text, kind])
    return [(text, kind) for text, kind in merged]
