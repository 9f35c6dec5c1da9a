"""A rename keeps its program's shape: the decoder refuses the tokens that would break it.

Asked "Rename `stmt` -> `stmt2`", the shipped model writes copies with gens between, but on the
wrong lines: it copies lines holding `stmt` unchanged, rewrites others, skips some. 0 of the 22
held-out dev renames came out exact, also after runs trained on three times the renames and with a
prompt listing the lines (docs/results.md, runs 16 and 17). Finding the lines is what it cannot do,
and what a checker can: `locate.rename_lines` lists the lines holding the old name, and
`keep_out.RenameShape` says what a rename's program looks like (front to back, copies on the other
lines, gens only on those lines and at most their run, one output line per input line, the whole
input covered). Here the decoder refuses every token that would leave that shape, and a gen that has
written its lines may only close. What each rewritten line says is still the model's to write.

Measured on the 22 held-out dev renames (docs/results.md, 2026-12-07): exact 0 -> 11 (see there for
the full 240). Only instructions that ask for a rename of a name the input holds are touched
(`locate.requested_rename`); otherwise the decode is exactly as without the guard. On by default in
model mode (`EditEngine(guard_renames=False)`, `edit` / `evaluate --no-rename-guard` turn it off);
not in a traced or branched run (search.py); in process only: a remote engine (vLLM, SGLang,
llama.cpp server) chooses its own tokens.
"""

from __future__ import annotations

import torch

from backend.core.keep_out import RenameShape
from backend.core.lines import line_count, split_lines
from backend.core.locate import rename_lines
from backend.runtime.decode_run import DecodeRun
from backend.runtime.early_end import rest_to_copy

# A bound that is never met while every reachable state keeps an allowed token (at most the ten
# digits, '-', '"' and EOS are refused in a row); past it the choice stands.
MAX_REFUSALS = 64


def rename_shape(source: str, instruction: str | None) -> RenameShape | None:
    """The shape a program for `instruction` on `source` must keep, when it asks for a rename of a
    name the input holds; else None (the guard is off)."""
    kept_out = rename_lines(instruction or "", split_lines(source))
    return RenameShape(tuple(kept_out), line_count(source)) if kept_out else None


def keep_rename_shape(run: DecodeRun, logits: torch.Tensor, token: int | None) -> int | None:
    """The model's choice, or its best choice that keeps the program in the run's rename shape.
    `logits` were masked in place by `choose`; refused tokens are set to -inf there too. A gen that
    has written all its lines may only close: its choice is among the tokens that spell '</gen>'.
    Without a shape to keep (`run.rename_shape` None) the choice is returned as it is."""
    if run.rename_shape is None:
        return token
    temperature, top_p, generator = run.sampling
    if token is not None and not in_shape(run, token) and open_gen_is_full(run):
        with torch.inference_mode():
            closing = run.grammar.gen_close_ids(run.state.core[1])  # core[1]: '</gen>' written so far
            kept = logits.index_select(0, closing)
            logits.fill_(float("-inf"))
            logits.index_copy_(0, closing, kept)
        token = run.grammar.choose(logits, run.state, temperature, top_p, generator)
    for _ in range(MAX_REFUSALS):
        if token is None or in_shape(run, token):
            return token
        run.counts.kept_out_refused += 1
        with torch.inference_mode():
            logits[token] = float("-inf")
        token = run.grammar.choose(logits, run.state, temperature, top_p, generator)
    return token  # not reached while the invariant holds: a guard must never stop a decode


def open_gen_is_full(run: DecodeRun) -> bool:
    """Whether the run is inside a gen that has written every line the shape lets it write."""
    shape = run.rename_shape
    if shape is None or run.state.mode != "gen":
        return False
    line = shape.covered(run.ops)
    return line is not None and shape.gen_is_full(line, run.fsm.open_gen_text(run.state))


def in_shape(run: DecodeRun, token: int) -> bool:
    """Whether choosing `token` leaves the program able to end in the rename's shape."""
    shape = run.rename_shape
    if shape is None:
        return True
    if token == run.grammar.eos_id:
        return shape.may_end(run.ops, rest_to_copy(run.ops, run.state.n_lines) if run.copy_rest else None)
    step = run.fsm.advance(run.state, token)
    return shape.allows(step.state.core, run.fsm.open_gen_text(step.state), run.ops, step.completed)
