"""The decoder's side of "copies move forward" (backend/core/copy_order.py), model mode.

A token that would make the copy being written start at or before the furthest line already
copied (while some line is left to copy) is refused and the model's next choice taken, up to
`MAX_REFUSALS` times per step (a first line number is refused digit by digit: at most the ten
digits and '-' in a row; then the choice stands, a rule never stops a decode). Where the
instruction fixes the program's shape (shape_guard.py) the shape already decides every copy, and
this rule stays out of its way. On by default (`EditEngine(forward_copies=False)`, `edit` /
`evaluate --allow-backward-copies` turn it off); not in a traced or branched run (search.py). A
remote engine gets the floor in each request's grammar instead (remote.py).
"""

from __future__ import annotations

import torch

from backend.core.copy_order import goes_back
from backend.runtime.decode_run import DecodeRun

MAX_REFUSALS = 16


def keep_copies_forward(run: DecodeRun, logits: torch.Tensor, token: int | None) -> int | None:
    """The model's choice, or its next choice while the chosen token would copy back over lines the
    program has copied. `logits` were masked in place by `choose`; refused tokens are set to -inf."""
    if not run.forward_copies or run.shape is not None:
        return token
    token, refused = run.choose_unless(logits, token, lambda candidate: copies_back(run, candidate), MAX_REFUSALS)
    run.counts.backward_refused += refused
    return token


def copies_back(run: DecodeRun, token: int) -> bool:
    """Whether `token`, read now, commits the program to a copy that goes back (copy_order.py).
    Inside a gen only a token holding '>' can close it, so the others are not walked (the hot path)."""
    if run.state.mode == "gen" and b">" not in run.grammar.token_bytes(token):
        return False
    step = run.fsm.advance(run.state, token)
    return goes_back(step.state.core, step.completed, run.ops, run.state.n_lines)
