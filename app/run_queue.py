"""Admission to the model: one run at a time (the CPU is shared and timings must not disturb each
other), at most `max_waiting` more waiting in line, first come first served.

`join()` refuses at once with a "busy, N ahead of you" message when the line is full; a waiting
caller learns how many runs are ahead of it and can leave (cancel) before it runs.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator


class Busy(ValueError):
    """The line is full; the message says how many are ahead and what to do."""


class RunQueue:
    def __init__(self, max_waiting: int = 8) -> None:
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._line: list[int] = []          # tickets; the head is the run on the model
        self._numbers = itertools.count(1)

    def join(self) -> int:
        """A ticket at the end of the line; Busy when `max_waiting` are already waiting."""
        with self._cond:
            waiting = max(0, len(self._line) - 1)
            if waiting >= self.max_waiting:
                raise Busy(
                    f"busy: {len(self._line)} runs ahead of you (at most {self.max_waiting} may wait); "
                    "nothing was started, try again in a minute"
                )
            ticket = next(self._numbers)
            self._line.append(ticket)
            return ticket

    def ahead(self, ticket: int) -> int:
        with self._cond:
            return self._line.index(ticket) if ticket in self._line else 0

    def waiting(self, ticket: int, *, cancel: threading.Event, every: float = 0.5) -> Iterator[int]:
        """Yields how many runs are ahead (at least every `every` seconds) until it is this
        ticket's turn or `cancel` is set; then returns. The caller checks `cancel` afterwards."""
        while not cancel.is_set():
            ahead = self.ahead(ticket)
            if ahead == 0:
                return
            yield ahead
            with self._cond:  # woken by leave(); `every` bounds a missed wake-up
                self._cond.wait(every)

    def leave(self, ticket: int) -> None:
        """Leave the line (after the run, or when cancelled while waiting). Idempotent."""
        with self._cond:
            if ticket in self._line:
                self._line.remove(ticket)
                self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._line)

