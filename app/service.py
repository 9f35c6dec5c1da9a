"""The app's one service object: models (loaded in the background), the EditEngine, storage, limits.

Handlers (app/handlers.py) translate widget values into calls here; nothing here knows Gradio.

Threads: each model loads in its own background thread (status "loading model…" -> ready or the
error). A decode runs in a producer thread that feeds every DecodeEvent into a RunTracker; the
caller's generator samples snapshots at its own rate, so the engine never waits for a browser and
its timings are not disturbed by rendering. The finished edit (or the partial one, on cancel) is
committed to storage by the producer before the final snapshot is handed out.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.progress import RunTracker, Snapshot
from backend.storage import EditRecord, NewEdit, SessionRecord, Storage, StorageError

STRATEGIES = ("ar", "pld", "cad")
MODES = ("model", "reference")


class InputError(ValueError):
    """A request the app refuses; the message is shown to the user as is."""


@dataclass(frozen=True)
class Limits:
    max_input_chars: int = 20_000
    max_input_lines: int = 1_000
    max_instruction_chars: int = 2_000
    max_new_tokens: int = 2_048      # the most a user may ask for
    default_new_tokens: int = 512

    def describe(self) -> str:
        return (
            f"limits: {self.max_input_chars:,} characters / {self.max_input_lines:,} lines of input, "
            f"{self.max_new_tokens:,} new tokens"
        )


@dataclass(frozen=True)
class AppConfig:
    model: str | None = None          # None: models.yaml's default
    db_url: str | None = None         # None: $COPY_AS_DECODE_DB or var/copy_as_decode.sqlite3
    limits: Limits = field(default_factory=Limits)
    include_random: bool = False      # list random-weight models (timing only) in the picker
    data_dir: str | None = None       # corpora for the Annotate tab's import
    update_interval_s: float = 0.2     # page refresh while streaming; browser rendering competes with the model for CPU


@dataclass(frozen=True)
class ModelStatus:
    name: str
    state: str                        # "idle" | "loading" | "ready" | "error"
    text: str
    ready: bool


@dataclass(frozen=True)
class RunRequest:
    model: str
    source: str
    instruction: str
    strategy: str = "cad"
    mode: str = "model"
    target: str | None = None
    max_new_tokens: int = 512


class _ModelSlot:
    def __init__(self, name: str) -> None:
        self.name = name
        self.state = "idle"
        self.error: str | None = None
        self.loaded: Any = None
        self.engine: Any = None
        self.step_seconds: float | None = None
        self.started = 0.0
        self.load_seconds = 0.0
        self.ready = threading.Event()
        self.lock = threading.Lock()


class AppService:
    def __init__(self, config: AppConfig | None = None, *, storage: Storage | None = None) -> None:
        self.config = config or AppConfig()
        self.limits = self.config.limits
        self.storage = storage or Storage(self.config.db_url)
        self._slots: dict[str, _ModelSlot] = {}
        self._slots_lock = threading.Lock()
        self._cancels: dict[str, threading.Event] = {}
        self._cancels_lock = threading.Lock()

    # -- models --------------------------------------------------------------------------------

    @property
    def default_model(self) -> str:
        if self.config.model:
            return self.config.model
        from backend.runtime.models import default_model_name

        return default_model_name()

    def model_choices(self) -> list[tuple[str, str]]:
        """(label, name) for the picker: usable entries of models.yaml, plus the configured model."""
        from backend.runtime.models import get_spec, usable_models

        specs = usable_models(include_random=self.config.include_random)
        names = [s.name for s in specs]
        choices = [(s.label, s.name) for s in specs]
        if self.default_model not in names:
            try:
                choices.insert(0, (get_spec(self.default_model).label, self.default_model))
            except Exception:  # noqa: BLE001 - an ad-hoc directory: show its name
                choices.insert(0, (self.default_model, self.default_model))
        return choices

    def _slot(self, name: str) -> _ModelSlot:
        with self._slots_lock:
            if name not in self._slots:
                self._slots[name] = _ModelSlot(name)
            return self._slots[name]

    def load_model(self, name: str | None = None) -> ModelStatus:
        """Start loading `name` in the background (no-op when loading or loaded); returns its status."""
        slot = self._slot(name or self.default_model)
        with slot.lock:
            if slot.state in ("idle", "error"):
                slot.state, slot.error, slot.started = "loading", None, time.monotonic()
                slot.ready.clear()
                threading.Thread(target=self._load, args=(slot,), name=f"load-{slot.name}", daemon=True).start()
        return self.model_status(slot.name)

    def _load(self, slot: _ModelSlot) -> None:
        try:
            from backend.runtime.engine import EditEngine
            from backend.runtime.models import load_model

            loaded = load_model(slot.name)
            engine = EditEngine(loaded)
            with slot.lock:
                slot.loaded, slot.engine = loaded, engine
                slot.state = "measuring"
            step = float(engine.step_seconds())  # measured once per model on this machine
            with slot.lock:
                slot.step_seconds = step
                slot.load_seconds = time.monotonic() - slot.started
                slot.state = "ready"
        except BaseException as error:  # noqa: BLE001 - shown on the page; the app keeps serving
            with slot.lock:
                slot.state = "error"
                slot.error = f"{type(error).__name__}: {error}"
        finally:
            slot.ready.set()

    def model_status(self, name: str | None = None) -> ModelStatus:
        slot = self._slot(name or self.default_model)
        with slot.lock:
            state = slot.state
            if state == "idle":
                text = f"{slot.name}: not loaded"
            elif state == "loading":
                text = f"loading model… {slot.name} ({time.monotonic() - slot.started:.0f} s)"
            elif state == "measuring":
                text = f"loading model… {slot.name}: measuring the per-token step time"
            elif state == "ready":
                loaded = slot.loaded
                weights = getattr(loaded, "weights_label", "")
                random_note = " — random weights: its programs are garbage (timing only)" if "random" in weights else ""
                text = (
                    f"ready: {slot.name} on {getattr(loaded, 'device', '?')} ({str(getattr(loaded, 'dtype', '')).replace('torch.', '')}), "
                    f"plain decoding {slot.step_seconds * 1000:.0f} ms/token, loaded in {slot.load_seconds:.0f} s{random_note}"
                )
            else:
                text = f"error loading {slot.name}: {slot.error}"
            return ModelStatus(slot.name, state, text, state == "ready")

    def wait_until_ready(self, name: str | None = None, timeout: float | None = None) -> ModelStatus:
        slot = self._slot(name or self.default_model)
        if slot.state == "idle":
            self.load_model(slot.name)
        slot.ready.wait(timeout)
        return self.model_status(slot.name)

    def _ready_slot(self, name: str) -> _ModelSlot:
        status = self.load_model(name)
        if not status.ready:
            if status.state == "error":
                raise InputError(status.text)
            raise InputError(f"the model is still loading ({status.text}); try again in a moment")
        return self._slot(name)

    def step_seconds(self, name: str) -> float | None:
        return self._slot(name).step_seconds

    # -- input checks --------------------------------------------------------------------------

    def read_upload(self, path: str | Path | None) -> str:
        """The uploaded file as text, byte-exact (CRLF and a missing final newline kept).

        Rejects (InputError): a file that is not UTF-8, holds NUL bytes, or is over the input limit.
        """
        if not path:
            return ""
        data = Path(path).read_bytes()
        name = Path(path).name
        if len(data) > self.limits.max_input_chars * 4:
            raise InputError(
                f"{name} is {len(data):,} bytes; the input limit is {self.limits.max_input_chars:,} characters"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputError(
                f"{name} is not UTF-8 text: byte 0x{data[error.start]:02x} at offset {error.start} is not valid "
                "UTF-8. Save the file as UTF-8 and upload it again."
            ) from None
        if "\x00" in text:
            raise InputError(f"{name} looks binary (it contains NUL bytes); upload a text file")
        self.check_input(text)
        return text

    def check_input(self, source: str) -> None:
        limits = self.limits
        if len(source) > limits.max_input_chars:
            raise InputError(
                f"the input is {len(source):,} characters; the limit is {limits.max_input_chars:,} "
                "(start the app with --max-input-chars to change it)"
            )
        from backend.core.lines import line_count

        lines = line_count(source)
        if lines > limits.max_input_lines:
            raise InputError(
                f"the input has {lines:,} lines; the limit is {limits.max_input_lines:,} "
                "(start the app with --max-input-lines to change it)"
            )

    def check_request(self, request: RunRequest) -> RunRequest:
        """The request, validated; InputError says what to change."""
        if request.strategy not in STRATEGIES:
            raise InputError(f"unknown strategy {request.strategy!r}; use one of {', '.join(STRATEGIES)}")
        if request.mode not in MODES:
            raise InputError(f"unknown mode {request.mode!r}; use model or reference")
        if not request.source:
            raise InputError("the input is empty: paste text or upload a file")
        self.check_input(request.source)
        if len(request.instruction) > self.limits.max_instruction_chars:
            raise InputError(
                f"the instruction is {len(request.instruction):,} characters; the limit is "
                f"{self.limits.max_instruction_chars:,}"
            )
        if request.mode == "model" and not request.instruction.strip():
            raise InputError("write an instruction (what should change), or use reference mode with a desired result")
        if request.mode == "reference":
            if not request.target:
                raise InputError("reference mode needs the desired result in the target box")
            if len(request.target) > self.limits.max_input_chars:
                raise InputError(
                    f"the desired result is {len(request.target):,} characters; the limit is "
                    f"{self.limits.max_input_chars:,}"
                )
        try:
            tokens = int(request.max_new_tokens)
        except (TypeError, ValueError):
            raise InputError("max new tokens must be a whole number") from None
        if not 1 <= tokens <= self.limits.max_new_tokens:
            raise InputError(
                f"max new tokens must be between 1 and {self.limits.max_new_tokens:,} "
                "(start the app with --max-new-tokens to raise the limit)"
            )
        return replace(request, max_new_tokens=tokens, target=request.target if request.mode == "reference" else None)

    def prepare(self, request: RunRequest) -> RunRequest:
        """check_request, then the model must be ready and its engine must accept the request
        (context length etc.); InputError otherwise. Nothing is stored or started."""
        request = self.check_request(request)
        slot = self._ready_slot(request.model)
        from backend.runtime.engine import EditError

        try:
            slot.engine.validate(
                request.source, request.instruction, strategy=request.strategy, mode=request.mode,
                target=request.target, max_new_tokens=request.max_new_tokens,
            )
        except EditError as error:
            raise InputError(str(error)) from None
        return request

    # -- cancel --------------------------------------------------------------------------------

    def begin_run(self, key: str) -> threading.Event:
        """A fresh cancel flag for `key` (one browser session); cancel(key) sets it."""
        with self._cancels_lock:
            event = threading.Event()
            self._cancels[key] = event
            return event

    def cancel(self, key: str) -> bool:
        with self._cancels_lock:
            event = self._cancels.get(key)
        if event is None or event.is_set():
            return False
        event.set()
        return True

    def end_run(self, key: str, event: threading.Event) -> None:
        with self._cancels_lock:
            if self._cancels.get(key) is event:
                del self._cancels[key]

    # -- runs ----------------------------------------------------------------------------------

    def new_session(self, request: RunRequest, *, kind: str) -> SessionRecord:
        title = (request.instruction.strip().splitlines() or [""])[0]
        return self.storage.create_session(
            kind=kind, model=request.model, mode=request.mode, input_text=request.source, title=title
        )

    def stream_run(
        self,
        request: RunRequest,
        *,
        session_id: int,
        cancel: threading.Event | None = None,
        interval: float | None = None,
    ) -> Iterator[Snapshot]:
        """Snapshots of one strategy run, about every `interval` seconds while anything changes;
        the last one has done=True and extra["edit"] (the stored EditRecord) or extra["save_error"].

        The request must have passed check_request. If the consumer stops iterating early (the
        browser went away) the run is cancelled and its partial result still stored.
        """
        slot = self._ready_slot(request.model)
        cancel = cancel or threading.Event()
        interval = self.config.update_interval_s if interval is None else interval
        tracker = RunTracker(request.strategy, step_seconds=slot.step_seconds)
        finished = threading.Event()
        outcome: dict[str, Any] = {}

        def produce() -> None:
            try:
                tracker.restart_clock()
                events = slot.engine.run(
                    request.source, request.instruction, strategy=request.strategy, mode=request.mode,
                    target=request.target, max_new_tokens=request.max_new_tokens, cancel=cancel,
                )
                for event in events:
                    tracker.add(event)
            except Exception as error:  # noqa: BLE001 - reported in the snapshot, partial output kept
                tracker.fail(f"{type(error).__name__}: {error}")
            try:
                outcome["edit"] = self.storage.add_edit(session_id, self._new_edit(request, tracker))
            except StorageError as error:
                outcome["save_error"] = str(error)
            except Exception as error:  # noqa: BLE001
                outcome["save_error"] = f"could not save the edit: {type(error).__name__}: {error}"
            finally:
                finished.set()

        producer = threading.Thread(target=produce, name=f"decode-{request.strategy}", daemon=True)
        producer.start()
        last_key: tuple[Any, ...] | None = None
        last_yield = 0.0
        try:
            while not finished.wait(interval):
                snap = tracker.snapshot()
                key = (len(snap.spans), sum(len(t) for t, _ in snap.spans), snap.metrics["forwards"])
                now = time.monotonic()
                if key != last_key or now - last_yield >= 0.5:  # the timer still ticks during prefill
                    last_key, last_yield = key, now
                    yield snap
            producer.join()
            final = tracker.snapshot()
            yield replace(final, extra=dict(outcome))
        finally:
            if not finished.is_set():
                cancel.set()

    def _new_edit(self, request: RunRequest, tracker: RunTracker) -> NewEdit:
        snap = tracker.snapshot()
        result = snap.result
        summary = tracker.event_summary()
        summary["wall_seconds"] = snap.wall_seconds
        metrics = _json_safe(snap.metrics)
        if result is None:  # the engine raised before its done event
            return NewEdit(
                input=request.source, instruction=request.instruction, output=snap.output,
                strategy=request.strategy, model=request.model, mode=request.mode,
                program=snap.program or None, target=request.target, partial=True, stop_reason="error",
                error=snap.error, metrics=metrics, events=_json_safe(summary),
            )
        return NewEdit(
            input=request.source, instruction=request.instruction, output=result.output,
            strategy=request.strategy, model=request.model, mode=request.mode, program=result.program,
            target=request.target, partial=bool(result.partial), stop_reason=str(result.stop_reason),
            error=result.error, metrics=metrics, events=_json_safe(summary),
        )

    # -- annotation queue from a corpus ---------------------------------------------------------

    def import_corpus(self, name: str, count: int) -> tuple[SessionRecord, list[EditRecord]]:
        """Store the first `count` cases of a corpus as reference edits (output = the target, program =
        the oracle's line program), so annotators can judge them. Fast: no model runs."""
        from backend.core.corpora import CorpusError, load_corpus
        from backend.core.oracle import oracle_program
        from backend.core.program import render_program

        if not 1 <= count <= 500:
            raise InputError("import between 1 and 500 cases at a time")
        try:
            cases = load_corpus(name, self.config.data_dir)[:count]
        except CorpusError as error:
            raise InputError(str(error)) from None
        edits = []
        for case in cases:
            ops = oracle_program(case.source, case.target)
            edits.append(NewEdit(
                input=case.source, instruction=case.instruction or "", output=case.target,
                strategy="cad", model="oracle (corpus target)", mode="reference",
                program=render_program(ops), target=case.target, case_id=case.id,
                events={"spans": [[kind, text] for text, kind in program_spans(ops, case.source)]},
            ))
        return self.storage.add_session_with_edits(
            kind="corpus", model="oracle (corpus target)", mode="reference", title=f"{name}: {len(edits)} cases",
            edits=edits,
        )

    def close(self) -> None:
        self.storage.close()


def program_spans(ops: Any, source: str) -> list[tuple[str, str]]:
    """(text, kind) spans of a program's output: copied lines as "copy", generated text as "gen"."""
    from backend.core.lines import split_lines
    from backend.core.program import CopyLines, Gen

    lines = split_lines(source)
    spans: list[tuple[str, str]] = []
    for op in ops:
        if isinstance(op, CopyLines):
            spans.append(("".join(lines[op.start - 1 : op.end]), "copy"))
        elif isinstance(op, Gen):
            spans.append((op.text, "gen"))
    return spans


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
