"""An edit whose place the instruction fixes keeps its program's shape: the decoder refuses the
tokens that would break it.

"Rename `stmt` -> `stmt2`", "Delete lines 4-6", "Add `pass` after line 9", "Change 1 to 2 on line
12": such instructions fix which input lines are kept, dropped or rewritten and where new lines go
(backend/core/addressed.py reads them; backend/core/line_shape.py says what a program in that shape
looks like). The shipped model writes copies and gens, on the wrong lines: it copies the line it
should rewrite or drop, rewrites a neighbour, skips lines, stops a copy one line short
(docs/results.md: 0 of 22 held-out renames exact under every adapter and prompt tried). Finding the
lines is what it cannot do, and what a checker can. Here the decoder refuses every token that would
leave the shape (the model's next choice is taken), and a gen that has written its lines may only
close. Where the instruction quotes the new line, or it follows from the instruction (a literal
changed, a name renamed), the gen's text is held to it as well (`line_shape.LineText`): the model's
own choices are tried first (its indentation, its choice among the options), and after
QUOTED_TRIES refusals the quoted text's next token is taken. Otherwise what each rewritten or
inserted line says is the model's to write ("Fix the bug on line 7").

Measured on the held-out dev split (docs/results.md): renames 0 -> 11 of 22 exact (2026-12-07);
the other addressed kinds in the same section. Only instructions whose every clause is an addressed
edit of lines the input has are touched; otherwise the decode is exactly as without the guard. On by
default in model mode (`EditEngine(guard_shapes=False)`, `edit` / `evaluate --no-shape-guard` turn
it off); not in a traced or branched run (search.py). A remote engine (vLLM, SGLang, llama.cpp
server) gives no logits: there the shape goes into each request's grammar (remote_shape.py).
"""

from __future__ import annotations

import torch

from backend.core.addressed import requested_shape
from backend.core.line_shape import LineShape
from backend.core.lines import split_lines
from backend.runtime.decode_run import DecodeRun
from backend.runtime.early_end import rest_to_copy
from backend.runtime.program_text import encode_text

# A bound that is never met while every reachable state keeps an allowed token (at most the ten
# digits, '-', '"' and EOS are refused in a row, and a quoted line's text is written for the model
# after QUOTED_TRIES); past it the choice stands.
MAX_REFUSALS = 64
# Where the instruction quotes the line a gen writes, the model's own choices are tried this many
# times (its indentation, its spelling of the text), then the quoted text's next token is taken.
QUOTED_TRIES = 8


def program_shape(source: str, instruction: str | None) -> LineShape | None:
    """The shape a program for `instruction` on `source` must keep, when the instruction fixes one;
    else None (the guard is off)."""
    return requested_shape(instruction, split_lines(source))


def keep_shape(run: DecodeRun, logits: torch.Tensor, token: int | None) -> int | None:
    """The model's choice, or its best choice that keeps the program in the run's shape.
    `logits` were masked in place by `choose`; refused tokens are set to -inf there too. A gen that
    has written all its lines may only close: its choice is among the tokens that spell '</gen>'.
    Without a shape to keep (`run.shape` None) the choice is returned as it is."""
    if run.shape is None:
        return token
    temperature, top_p, generator = run.sampling
    if token is not None and not in_shape(run, token) and open_gen_is_full(run):
        with torch.inference_mode():
            closing = run.grammar.gen_close_ids(run.state.core[1])  # core[1]: '</gen>' written so far
            kept = logits.index_select(0, closing)
            logits.fill_(float("-inf"))
            logits.index_copy_(0, closing, kept)
        token = run.grammar.choose(logits, run.state, temperature, top_p, generator)
    for tries in range(MAX_REFUSALS):
        if token is None or in_shape(run, token):
            return token
        run.counts.shape_refused += 1
        quoted = quoted_text_token(run) if tries >= QUOTED_TRIES else None
        if quoted is not None:
            return quoted
        with torch.inference_mode():
            logits[token] = float("-inf")
        token = run.grammar.choose(logits, run.state, temperature, top_p, generator)
    return token  # not reached while the invariant holds: a guard must never stop a decode


def quoted_text_token(run: DecodeRun) -> int | None:
    """The first token of what is left of the line the open gen must write, where the instruction
    quotes it ("Add `pass` after line 9"), when that token keeps the shape; else None."""
    shape = run.shape
    if shape is None or run.state.mode != "gen":
        return None
    position = shape.covered(run.ops)
    written = run.fsm.open_gen_text(run.state) + "</gen>"[: run.state.core[1]]  # a pending '<...' is text here
    rest = shape.text_to_write(position, written) if position is not None else None
    ids = encode_text(run.tokenizer, rest) if rest else []
    try:
        return ids[0] if ids and in_shape(run, ids[0]) else None
    except ValueError:  # a token the grammar does not allow here (a part of '</gen>')
        return None


def open_gen_is_full(run: DecodeRun) -> bool:
    """Whether the run is inside a gen that has written every line the shape lets it write."""
    shape = run.shape
    if shape is None or run.state.mode != "gen":
        return False
    position = shape.covered(run.ops)
    return position is not None and shape.gen_is_full(position, run.fsm.open_gen_text(run.state))


def in_shape(run: DecodeRun, token: int) -> bool:
    """Whether choosing `token` leaves the program able to end in the shape."""
    shape = run.shape
    if shape is None:
        return True
    if token == run.grammar.eos_id:
        return shape.may_end(run.ops, rest_at_end(run))
    step = run.fsm.advance(run.state, token)
    return shape.allows(step.state.core, run.fsm.open_gen_text(step.state), run.ops, step.completed)


def rest_at_end(run: DecodeRun) -> tuple[int, int] | None:
    """The lines the decoder copies after the model's EOS (early_end.py): none when the program
    already reads its whole shape (a deletion of the file's last lines stays deleted)."""
    if not run.copy_rest or (run.shape is not None and run.shape.may_end(run.ops, None)):
        return None
    return rest_to_copy(run.ops, run.state.n_lines)
