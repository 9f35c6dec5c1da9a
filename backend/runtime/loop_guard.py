"""Notices a model that writes the same program items again and again, so a decode can stop early.

Seen with the untrained embedded model: "Rename the variable total to subtotal" gave
`<copy lines="23-23"/>` ~45 times in a row and ran 207 s to the token cap. A block of one to
`max_period` items (copies or gens, compared by value) completed `repeats` times in a row is a
loop. A real edit may copy a line twice or three times; five identical blocks in a row is not an
edit anyone asks for.
"""

from __future__ import annotations

from backend.core.program import Gen, Op, render_program

LOOP_REPEATS = 5
LOOP_MAX_PERIOD = 3
GEN_WINDOW = 320        # characters of an open gen's tail checked for a repeated chunk
GEN_PERIODS = range(2, 41)
_SHOWN_CHARS = 40  # of a repeated gen's text, in the message


class LoopGuard:
    """Feed it every completed op (`add`); it says when the program has started looping.

    Rejects repeats < 2 or max_period < 1 (ValueError). Keeps only the last
    repeats * max_period ops.
    """

    def __init__(self, *, repeats: int = LOOP_REPEATS, max_period: int = LOOP_MAX_PERIOD) -> None:
        if repeats < 2 or max_period < 1:
            raise ValueError(f"need repeats >= 2 and max_period >= 1, got {repeats} and {max_period}")
        self.repeats = repeats
        self.max_period = max_period
        self._ops: list[Op] = []

    def check_gen(self, body: bytes) -> str | None:
        """The open gen's bytes so far (`FSMState.body`): a plain message when its tail repeats
        one chunk (`gen_loop`), else None. Reads only the last few hundred bytes."""
        if len(body) < GEN_WINDOW:
            return None
        return gen_loop(body[-4 * GEN_WINDOW:].decode("utf-8", "replace"))

    def add(self, op: Op) -> str | None:
        """Record one completed op; a plain message when the last ops repeat one block, else None."""
        self._ops.append(op)
        del self._ops[: max(0, len(self._ops) - self.repeats * self.max_period)]
        for period in range(1, self.max_period + 1):
            tail = self._ops[-period * self.repeats:]
            if len(tail) == period * self.repeats and all(tail[i] == tail[i % period] for i in range(len(tail))):
                return f"stopped: the model repeated {_block_text(tail[:period])} {self.repeats} times"
        return None


def gen_loop(text: str) -> str | None:
    """A plain message when the tail of an open gen's `text` is one chunk repeated (see the module
    docstring), else None."""
    tail = text[-GEN_WINDOW:]
    if len(tail) < GEN_WINDOW:
        return None
    for period in GEN_PERIODS:
        if tail[period:] == tail[:-period] and len(set(tail[:period])) > 1:
            return (f"stopped: the model repeated {tail[-period:]!r} inside a gen "
                    f"({GEN_WINDOW // period}+ times in its last {GEN_WINDOW} characters)")
    return None


def _block_text(ops: list[Op]) -> str:
    """The repeated items as program text on one line, a long gen shortened."""
    shown: list[Op] = []
    for op in ops:
        if isinstance(op, Gen) and len(op.text) > _SHOWN_CHARS:
            op = Gen(op.text[:_SHOWN_CHARS] + "…")
        shown.append(op)
    text = "".join(render_program([op]).rstrip("\n") for op in shown)
    return text.replace("\n", "\\n") if any(isinstance(op, Gen) for op in shown) else text

