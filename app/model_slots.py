"""The app's models: each loads once, in its own background thread ("loading model…" -> ready or
the error), then measures its plain-decoding step time once. Nothing here knows Gradio.

Which models exist and which is the default come from models.yaml (backend.runtime.models); the
app works with whatever it lists, a trained model included.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


class ModelNotReady(ValueError):
    """The model is still loading or failed to load; the message says which."""


@dataclass(frozen=True)
class ModelStatus:
    name: str
    state: str                        # "idle" | "loading" | "measuring" | "ready" | "error"
    text: str
    ready: bool


class ModelSlot:
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

    def describe(self) -> str:
        """One line for the page (called with the lock held)."""
        if self.state == "idle":
            return f"{self.name}: not loaded"
        if self.state == "loading":
            return f"loading model… {self.name} ({time.monotonic() - self.started:.0f} s)"
        if self.state == "measuring":
            return f"loading model… {self.name}: measuring the per-token step time"
        if self.state == "error":
            return f"error loading {self.name}: {self.error}"
        loaded = self.loaded
        weights = getattr(loaded, "weights_label", "")
        random_note = " — random weights: its programs are garbage (timing only)" if "random" in weights else ""
        dtype = str(getattr(loaded, "dtype", "")).replace("torch.", "")
        runtime = getattr(loaded, "runtime", "?")
        return (
            f"ready: {self.name} on {runtime}, {getattr(loaded, 'device', '?')} ({dtype}), plain decoding "
            f"{(self.step_seconds or 0.0) * 1000:.0f} ms/token, loaded in {self.load_seconds:.0f} s{random_note}"
        )


class ModelSlots:
    def __init__(self, default: str | None, *, include_random: bool, limits: Any,
                 engine_options: dict[str, Any] | None = None) -> None:
        self._default = default
        self.engine_options = dict(engine_options or {})  # runtime / engine_url / engine_kind (issue 11)
        self.include_random = include_random
        self.limits = limits
        self._slots: dict[str, ModelSlot] = {}
        self._lock = threading.Lock()

    @property
    def default(self) -> str:
        if self._default:
            return self._default
        from backend.runtime.models import default_model_name

        return default_model_name()

    def choices(self) -> list[tuple[str, str]]:
        """(label, name) for the picker: usable entries of models.yaml, plus the configured model."""
        from backend.runtime.models import spec_for, usable_models

        specs = usable_models(include_random=self.include_random)
        choices = [(s.label, s.name) for s in specs]
        if self.default not in [s.name for s in specs]:
            try:
                choices.insert(0, (spec_for(self.default).label, self.default))
            except Exception:  # noqa: BLE001 - a directory it cannot describe: show its name
                choices.insert(0, (self.default, self.default))
        return choices

    def slot(self, name: str | None) -> ModelSlot:
        name = name or self.default
        with self._lock:
            if name not in self._slots:
                self._slots[name] = ModelSlot(name)
            return self._slots[name]

    def load(self, name: str | None = None) -> ModelStatus:
        """Start loading `name` in the background (no-op when loading or loaded); returns its status."""
        slot = self.slot(name)
        with slot.lock:
            if slot.state in ("idle", "error"):
                slot.state, slot.error, slot.started = "loading", None, time.monotonic()
                slot.ready.clear()
                threading.Thread(target=self._load, args=(slot,), name=f"load-{slot.name}", daemon=True).start()
        return self.status(slot.name)

    def _load(self, slot: ModelSlot) -> None:
        try:
            from backend.runtime.runtimes import open_engine

            # reuse_prompt: a second edit of the same file reads only the prompt's changed part
            engine = open_engine(slot.name, limits=self.limits, reuse_prompt=True, **self.engine_options)
            loaded = engine.loaded
            with slot.lock:
                slot.loaded, slot.engine, slot.state = loaded, engine, "measuring"
            step = float(engine.step_seconds())  # measured once per model on this machine
            with slot.lock:
                slot.step_seconds, slot.load_seconds = step, time.monotonic() - slot.started
                slot.state = "ready"
        except BaseException as error:  # noqa: BLE001 - shown on the page; the app keeps serving
            with slot.lock:
                slot.state, slot.error = "error", f"{type(error).__name__}: {error}"
        finally:
            slot.ready.set()

    def status(self, name: str | None = None) -> ModelStatus:
        slot = self.slot(name)
        with slot.lock:
            return ModelStatus(slot.name, slot.state, slot.describe(), slot.state == "ready")

    def wait_until_ready(self, name: str | None = None, timeout: float | None = None) -> ModelStatus:
        slot = self.slot(name)
        if slot.state == "idle":
            self.load(slot.name)
        slot.ready.wait(timeout)
        return self.status(slot.name)

    def ready_slot(self, name: str | None) -> ModelSlot:
        """The loaded slot; ModelNotReady (starting the load) otherwise."""
        status = self.load(name)
        if not status.ready:
            if status.state == "error":
                raise ModelNotReady(status.text)
            raise ModelNotReady(f"the model is still loading ({status.text}); try again in a moment")
        return self.slot(name)
