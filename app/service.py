"""The app's one service object: models, the run queue, storage, downloads and the request contract.

Handlers (app/tabs/) translate widget values into calls here; nothing here knows Gradio.

A request is checked once (backend.runtime.request.check_request with the app's EditLimits, then
the engine's `prepare`: tokenised once, context checked) and the run trusts it. Runs queue for the
model (app/run_queue.py: bounded, position shown, cancel while waiting). A decode runs in a
producer thread that feeds every DecodeEvent into a RunTracker; the caller's generator samples
snapshots at its own rate, so the engine never waits for a browser. The run is stored as
"running" before its first token, checkpointed about every second, and finished in place; a
per-run time budget stops a run that would hold the model too long (stop reason "time_limit").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.downloads import DownloadFolder
from app.model_slots import ModelNotReady, ModelSlot, ModelSlots, ModelStatus
from app.progress import RunTracker, Snapshot
from app.run_queue import RunQueue
from backend.runtime.prompt_lookup import TUNED_LOOKUP
from backend.runtime.request import APP_LIMITS, EditError, EditLimits, EditRequest, check_request, check_source
from backend.storage import EditRecord, NewEdit, SessionRecord, Storage, StorageError

__all__ = ["AppConfig", "AppService", "InputError", "ModelStatus", "PreparedRun", "RunRequest"]

InputError = EditError  # what the app refuses; the message is shown to the user as is


@dataclass(frozen=True)
class AppConfig:
    model: str | None = None          # None: models.yaml's default
    db_url: str | None = None         # None: $COPY_AS_DECODE_DB or var/copy_as_decode.sqlite3
    limits: EditLimits = APP_LIMITS
    include_random: bool = False      # list random-weight models (timing only) in the picker
    data_dir: str | None = None       # corpora for the Annotate tab's import
    update_interval_s: float = 0.2    # page refresh while streaming; browser rendering competes with the model for CPU
    max_waiting: int = 8              # runs that may wait for the model; more are told "busy"
    run_seconds: float = 300.0        # one run's time budget on the model
    checkpoint_seconds: float = 1.0   # how often a running edit's partial text is saved
    runtime: str = "auto"             # "auto" | "torch" | "llama.cpp": who runs the model in this process
    engine_url: str | None = None     # a vLLM / SGLang / llama.cpp server instead (docs/DEPLOY.md)
    engine_kind: str | None = None    # "vllm" | "sglang" | "llamacpp", with engine_url
    tuned_lookup: tuple[int, int] = TUNED_LOOKUP  # Compare's tuned prompt lookup
    align_snippets: bool = True       # model mode: update snippets merged by backend/core/snippet_apply.py when certain
    guard_shapes: bool = True         # model mode: the program keeps the instruction's shape (backend/runtime/shape_guard.py)


@dataclass(frozen=True)
class RunRequest:
    """Raw widget values of one run; `AppService.prepare` checks them."""

    model: str
    source: Any
    instruction: Any
    strategy: str = "cad"
    mode: str = "model"
    target: Any = None
    max_new_tokens: Any = None


@dataclass(frozen=True)
class PreparedRun:
    model: str
    request: EditRequest
    prepared: Any                     # backend.runtime.engine.PreparedEdit


class AppService:
    def __init__(self, config: AppConfig | None = None, *, storage: Storage | None = None) -> None:
        self.config = config or AppConfig()
        self.limits = self.config.limits
        self.storage = storage or Storage(self.config.db_url)
        self.interrupted_at_start = self.storage.mark_interrupted()  # runs a dead server left "running"
        engine_options = {"runtime": self.config.runtime, "engine_url": self.config.engine_url,
                          "engine_kind": self.config.engine_kind, "align_snippets": self.config.align_snippets,
                          "guard_shapes": self.config.guard_shapes}
        self.models = ModelSlots(self.config.model, include_random=self.config.include_random, limits=self.limits,
                                 engine_options=engine_options)
        self.queue = RunQueue(self.config.max_waiting)
        self.downloads = DownloadFolder()
        self._cancels: dict[str, threading.Event] = {}
        self._cancels_lock = threading.Lock()

    # -- models --------------------------------------------------------------------------------

    @property
    def default_model(self) -> str:
        return self.models.default

    def model_choices(self) -> list[tuple[str, str]]:
        return self.models.choices()

    def load_model(self, name: str | None = None) -> ModelStatus:
        return self.models.load(name)

    def model_status(self, name: str | None = None) -> ModelStatus:
        return self.models.status(name)

    def wait_until_ready(self, name: str | None = None, timeout: float | None = None) -> ModelStatus:
        return self.models.wait_until_ready(name, timeout)

    def step_seconds(self, name: str) -> float | None:
        return self.models.slot(name).step_seconds

    def _ready_slot(self, name: str) -> ModelSlot:
        try:
            return self.models.ready_slot(name)
        except ModelNotReady as error:
            raise InputError(str(error)) from None

    # -- the request contract ------------------------------------------------------------------

    def read_upload(self, path: str | Path | None, *, what: str = "the input") -> str:
        """The uploaded file as text, byte-exact (CRLF and a missing final newline kept).

        Rejects (InputError): a file that is not UTF-8, holds NUL bytes, or is over the input limit.
        """
        if not path:
            return ""
        data = Path(path).read_bytes()
        name = Path(path).name
        if len(data) > self.limits.max_source_chars * 4:
            raise InputError(
                f"{name} is {len(data):,} bytes; the input limit is {self.limits.max_source_chars:,} characters"
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
        return check_source(text, replace(self.limits, entry_point=False), what=f"{name}")

    def check_request(self, request: RunRequest) -> EditRequest:
        """The request under the app's limits; InputError says what to change."""
        return check_request(
            request.source, request.instruction, strategy=request.strategy, mode=request.mode,
            target=request.target, max_new_tokens=request.max_new_tokens, limits=self.limits,
        )

    def prepare(self, request: RunRequest) -> PreparedRun:
        """check_request, then the model must be ready and its engine must accept the request
        (context length): tokenised once here, trusted by the run. Nothing stored or started."""
        checked = self.check_request(request)
        slot = self._ready_slot(request.model)
        return PreparedRun(request.model, checked, slot.engine.prepare(checked))

    def with_strategy(self, run: PreparedRun, strategy: str, *, lookup: tuple[int, int] | None = None) -> PreparedRun:
        """The same request for another strategy (its own prompt, its own context check); `lookup`
        sets prompt lookup's (n-gram, drafts)."""
        checked = replace(run.request, strategy=strategy, lookup=lookup or run.request.lookup)
        return PreparedRun(run.model, checked, self._ready_slot(run.model).engine.prepare(checked))

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

    def is_running(self, key: str) -> bool:
        with self._cancels_lock:
            event = self._cancels.get(key)
        return event is not None and not event.is_set()

    # -- runs ----------------------------------------------------------------------------------

    def new_session(self, run: PreparedRun, *, kind: str) -> SessionRecord:
        request = run.request
        title = ((request.instruction or "").strip().splitlines() or [""])[0]
        return self.storage.create_session(
            kind=kind, model=run.model, mode=request.mode, input_text=request.source, title=title
        )

    def stream_run(
        self, run: PreparedRun, *, session_id: int, cancel: threading.Event | None = None,
        interval: float | None = None,
    ) -> Iterator[Snapshot]:
        """Snapshots of one strategy run, about every `interval` seconds while anything changes;
        the last one has done=True and extra["edit"] (the stored EditRecord) or extra["save_error"],
        and extra["stop_reason"] (the stored one: "time_limit" when the budget stopped it).

        The caller holds the model's turn (RunQueue). If the consumer stops iterating early (the
        browser went away) the run is cancelled and its partial result still stored.
        """
        slot = self._ready_slot(run.model)
        cancel = cancel or threading.Event()
        interval = self.config.update_interval_s if interval is None else interval
        producer = _Producer(self, slot, run, session_id, cancel)
        producer.start()
        last_key: tuple[Any, ...] | None = None
        last_yield = 0.0
        try:
            while not producer.finished.wait(interval):
                snap = producer.tracker.snapshot()
                key = (len(snap.spans), sum(len(t) for t, _ in snap.spans), snap.metrics["forwards"])
                now = time.monotonic()
                if key != last_key or now - last_yield >= 0.5:  # the timer still ticks during prefill
                    last_key, last_yield = key, now
                    yield snap
            producer.join()
            yield replace(producer.tracker.snapshot(), extra=dict(producer.outcome))
        finally:
            if not producer.finished.is_set():
                cancel.set()

    # -- annotation queue from a corpus ---------------------------------------------------------

    def import_corpus(self, name: str, count: int) -> tuple[SessionRecord | None, list[EditRecord], int]:
        """Store the first `count` cases of a corpus as reference edits (output = the target, program =
        the oracle's line program), so annotators can judge them. Cases already imported are skipped
        (returned count). Fast: no model runs."""
        from backend.data.corpora import CorpusError, load_corpus
        from backend.core.oracle import oracle_program
        from backend.core.program import render_program
        from backend.core.resolve import resolve_spans

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
                events={"spans": [[kind, text] for text, kind in resolve_spans(ops, case.source)]},
            ))
        result = self.storage.import_cases(
            kind="corpus", model="oracle (corpus target)", mode="reference", title=f"{name}: {len(edits)} cases",
            edits=edits,
        )
        return result.session, result.edits, result.skipped

    def close(self) -> None:
        self.storage.close()
        self.downloads.close()


class _Producer(threading.Thread):
    """Runs one strategy on the engine: stores it as running, feeds the tracker, checkpoints the
    partial text, enforces the time budget, and stores the result (finished, partial or failed)."""

    def __init__(self, service: AppService, slot: ModelSlot, run: PreparedRun, session_id: int,
                 cancel: threading.Event) -> None:
        super().__init__(name=f"decode-{run.request.strategy}", daemon=True)
        self.service, self.slot, self.run_ = service, slot, run
        self.session_id, self.cancel = session_id, cancel
        request = run.request
        self.tracker = RunTracker(request.strategy, step_seconds=slot.step_seconds,
                                  lookup=request.lookup if request.strategy == "pld" else None)
        self.finished = threading.Event()
        self.outcome: dict[str, Any] = {}
        self.over_budget = threading.Event()

    def run(self) -> None:
        storage, config = self.service.storage, self.service.config
        edit_id = self._start(storage)
        budget = threading.Timer(config.run_seconds, self._stop_at_budget)
        budget.daemon = True
        budget.start()
        try:
            self.tracker.restart_clock()
            last = time.monotonic()
            for event in self.slot.engine.run_prepared(self.run_.prepared, cancel=self.cancel):
                self.tracker.add(event)
                if edit_id is not None and time.monotonic() - last >= config.checkpoint_seconds:
                    last = time.monotonic()
                    self._checkpoint(storage, edit_id)
        except Exception as error:  # noqa: BLE001 - reported in the snapshot, partial output kept
            self.tracker.fail(f"{type(error).__name__}: {error}")
        finally:
            budget.cancel()
        try:
            self._finish(storage, edit_id)
        finally:
            self.finished.set()

    def _stop_at_budget(self) -> None:
        self.over_budget.set()
        self.cancel.set()

    def _start(self, storage: Storage) -> int | None:
        try:
            return storage.start_edit(self.session_id, self._new_edit(running=True)).id
        except StorageError as error:
            self.outcome["save_error"] = str(error)
            return None

    def _checkpoint(self, storage: Storage, edit_id: int) -> None:
        snap = self.tracker.snapshot()
        try:
            storage.checkpoint_edit(edit_id, output=snap.output, program=snap.program or None)
        except StorageError:
            pass  # a busy database skips one checkpoint; the final save still reports its own outcome

    def _finish(self, storage: Storage, edit_id: int | None) -> None:
        edit = self._new_edit()
        self.outcome["stop_reason"] = edit.stop_reason
        try:
            if edit_id is None:
                self.outcome["edit"] = storage.add_edit(self.session_id, edit)
            else:
                self.outcome["edit"] = storage.finish_edit(edit_id, edit)
            self.outcome.pop("save_error", None)
        except StorageError as error:
            self.outcome["save_error"] = str(error)
        except Exception as error:  # noqa: BLE001
            self.outcome["save_error"] = f"could not save the edit: {type(error).__name__}: {error}"

    def _new_edit(self, *, running: bool = False) -> NewEdit:
        request, snap = self.run_.request, self.tracker.snapshot()
        common: dict[str, Any] = dict(
            input=request.source, instruction=request.instruction or "", strategy=request.strategy,
            model=self.run_.model, mode=request.mode, target=request.target,
        )
        if running:
            return NewEdit(output="", **common)
        summary = self.tracker.event_summary()
        summary["wall_seconds"] = snap.wall_seconds
        result = snap.result
        if result is None:  # the engine raised before its done event
            return NewEdit(
                output=snap.output, program=snap.program or None, partial=True, stop_reason="error",
                error=snap.error, metrics=_json_safe(snap.metrics), events=_json_safe(summary), **common,
            )
        stop = str(result.stop_reason)
        if stop == "cancel" and self.over_budget.is_set():
            stop = "time_limit"
        return NewEdit(
            output=result.output, program=result.program, partial=bool(result.partial) or stop == "time_limit",
            stop_reason=stop, error=result.error, metrics=_json_safe(snap.metrics), events=_json_safe(summary),
            **common,
        )


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
