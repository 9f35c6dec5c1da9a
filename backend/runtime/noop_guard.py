"""Model-written items must do something: the decoder's "no no-op items" rule (model mode).

The shipped model's most common wrong program changes nothing. It copies up to some line, opens a
gen and writes the next input line verbatim (`<copy lines="1-19"/><gen>` + line 20 as it is), or
it splits a copy in two where a line should go ("Delete line 64" came back as
`<copy lines="1-63"/><copy lines="64-156"/>`). 59 of its 240 held-out dev programs changed
nothing (docs/results.md). An oracle program almost never holds either item: it merges adjacent
copies (no copy starts right after the copy before it in 5,000 training and dev programs), and
42 of 3,203 of its gens open with the next input line (where writing a short line out costs fewer
tokens than a copy tag). Any output can still be written without them (copy the line, then gen
the rest; one copy for two adjacent ones), so the rule takes away no output the grammar allowed.

So, in model mode, the decoder refuses a token that would
- complete a gen's first line as exactly the input line after the last copy (line 1 at the
  program's start), or
- complete the first line number of a copy that follows a copy as the line right after it,
and takes the model's next choice instead, up to `MAX_REFUSALS` times per step (then the choice
stands: a rule must never stop a decode). Only a gen's first line is checked: a gen that starts
differently is the model's edit. Line endings are compared without LF / CRLF, as the model sees
the input (lines.number_lines).
**Measured, it does not pay, so it is off by default**: on the 240 held-out dev cases the rule
changed 88 of the shipped model's programs; its no-change programs fell from 59 to 8 and not one
became exact (exact 66 -> 65, line similarity 0.952 -> 0.938): forced past the line it would have
echoed, the model writes a wrong line (docs/results.md).
It stays as an option to reproduce that (`EditEngine(avoid_noops=True)`, `edit --refuse-noops`,
`evaluate --refuse-noops`) and for models that know what to write.
A remote engine (vLLM, SGLang, llama.cpp server) chooses its own tokens: the rule is in process only.
"""

from __future__ import annotations

from typing import Sequence

import torch

from backend.core.char_grammar import FIRST_LINE, IN_TAG, LAST_LINE, Core, number_can_grow
from backend.core.lines import strip_line_ending
from backend.core.program import CopyLines, Gen, Op
from backend.runtime.decode_run import DecodeRun

MAX_REFUSALS = 8


def echoed_line(ops: Sequence[Op], lines: Sequence[str]) -> str | None:
    """The input line (ending stripped) an open gen must not start with, given the ops completed
    before it: the line after the last copy, line 1 at the start, None after a gen or past the
    input's end."""
    if ops and isinstance(ops[-1], Gen):
        return None
    index = ops[-1].end if ops and isinstance(ops[-1], CopyLines) else 0
    return strip_line_ending(lines[index]) if index < len(lines) else None


def completes_echo(body: bytes, token: bytes, echoed: str | None) -> bool:
    """Whether `token`, read after the open gen's `body`, completes the gen's first line as exactly
    `echoed`. False once the first line is complete, or when `echoed` is None."""
    if echoed is None or b"\n" in body:
        return False
    text = body + token
    end = text.find(b"\n")
    if end < 0:
        return False
    return strip_line_ending(text[: end + 1].decode("utf-8", "replace")) == echoed


def adjacent_start(ops: Sequence[Op]) -> int | None:
    """The first line a copy may not start at, given the ops completed before it: the line right
    after a copy that ends the program so far; None after a gen or at the start."""
    return ops[-1].end + 1 if ops and isinstance(ops[-1], CopyLines) else None


def chosen_first_line(core: Core, completed: Sequence[Op], n_lines: int) -> int | None:
    """The first line number of the copy being written, once it can no longer change: after its
    '-' (or a later character of the tag), when no further digit fits the input's `n_lines`, or in
    a copy the token completed. None while it can still grow, or outside a copy tag."""
    copies = [op for op in completed if isinstance(op, CopyLines)]
    if copies:
        return copies[0].start
    mode = core[0]
    if mode == LAST_LINE or (mode == IN_TAG and core[1].startswith('"')):
        return int(core[2])
    if mode == FIRST_LINE and core[1] and not number_can_grow(core[1], 1, n_lines):
        return int(core[1])
    return None


def refuse_noops(run: DecodeRun, logits: torch.Tensor, token: int | None) -> int | None:
    """The model's choice, or its next choice while the chosen token would write a no-op item: a
    gen opening with the line a copy would give, or a copy starting right after the copy before it
    (this module). `logits` were masked in place by `choose`."""
    token, refused = run.choose_unless(logits, token, lambda candidate: writes_noop(run, candidate), MAX_REFUSALS)
    run.counts.noop_refused += refused
    return token


def writes_noop(run: DecodeRun, token: int) -> bool:
    """Whether `token` completes a no-op item's telltale part."""
    if run.state.mode == "gen":
        echoed = echoed_line(run.ops, run.source_lines)
        return completes_echo(run.state.body, run.grammar.token_bytes(token), echoed)
    banned = adjacent_start(run.ops)
    if banned is None or run.state.mode not in ("between", "tag", "first"):
        return False
    step = run.fsm.advance(run.state, token)
    return chosen_first_line(step.state.core, step.completed, run.state.n_lines) == banned
