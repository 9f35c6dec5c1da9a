"""Ctrl-C / SIGTERM during a training run: stop after the step in progress, with a checkpoint."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any


class StopRequest:
    """Ctrl-C / SIGTERM while training: note it, so the loop stops after the step in progress with a
    checkpoint and writes the adapter (a run stopped to free the CPU keeps all its steps). The
    previous handlers are back after the first signal, so a second one aborts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restore()

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signal_name = signal.Signals(signum).name
        print(f"{self.signal_name}: stopping after this step with a checkpoint and the adapter "
              "(send it again to abort now)", file=sys.stderr, flush=True)
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
