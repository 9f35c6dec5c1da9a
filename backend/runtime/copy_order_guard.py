"""The decoder's side of "copies move forward" (backend/core/copy_order.py), model mode.

A token that would make the copy being written start at or before the furthest line already
copied, or, past the input's last line, open a copy or a second item, is refused and the model's
next choice taken (past the end that is the program's end once a gen has followed), up to
`MAX_REFUSALS` times per step (a first line number is refused digit by digit: at most the ten
digits and '-' in a row; then the choice stands, a rule never stops a decode). Where the
instruction fixes the program's shape (shape_guard.py) the shape already decides every copy, and
this rule stays out of its way. On by default (`EditEngine(forward_copies=False)`, `edit` /
`evaluate --allow-backward-copies` turn it off); not in a traced or branched run (search.py). A
remote engine gets the floor in each request's grammar instead (remote.py).
"""

from __future__ import annotations

from typing import Any

import torch

from backend.core.copy_order import goes_back, goes_past_end, items_past_end
from backend.runtime.decode_run import DecodeRun

MAX_REFUSALS = 16
COPY_TAG_START = b"<copy"


def keep_copies_forward(run: DecodeRun, logits: torch.Tensor, token: int | None) -> int | None:
    """The model's choice, or its next choice while the chosen token would copy back over lines the
    program has copied. `logits` were masked in place by `choose`; refused tokens are set to -inf."""
    if not run.forward_copies or run.shape is not None:
        return token
    past_end = 0

    def refuses(candidate: int) -> bool:
        nonlocal past_end
        if run.state.mode == "gen" and _writes_copy_tag(run, candidate):
            past_end += 1
            return True
        step = _read(run, candidate)
        if step is None:
            return False
        if goes_back(step.state.core, step.completed, run.ops, run.state.n_lines):
            return True
        beyond = goes_past_end(step.state.core, step.completed, run.ops, run.state.n_lines)
        past_end += beyond
        return beyond

    token, refused = run.choose_unless(logits, token, refuses, MAX_REFUSALS)
    run.counts.backward_refused += refused - past_end
    run.counts.past_end_refused += past_end
    return token


def _writes_copy_tag(run: DecodeRun, token: int) -> bool:
    """Whether `token` makes the gen after the input's last line write a copy tag as text: refused
    a copy there, the model opened a gen and wrote the tag in it (HumanEvalFix-JS/50, /63)."""
    tail = bytes(run.program[-len(COPY_TAG_START) + 1:]) + run.grammar.token_bytes(token)
    return COPY_TAG_START in tail and items_past_end(run.ops, run.state.n_lines) == 0


def _read(run: DecodeRun, token: int) -> Any:
    """The FSM step of reading `token` now, or None for a gen token that cannot end the gen: inside
    a gen only a token holding '>' can close it, so the others are not walked (the hot path)."""
    if run.state.mode == "gen" and b">" not in run.grammar.token_bytes(token):
        return None
    return run.fsm.advance(run.state, token)
