"""The one record every decoding strategy yields; the UI and the benchmarks both consume it.

A strategy is a generator of `DecodeEvent`s ending with exactly one `kind == "done"` event whose
`result` is the `DecodeResult`. Errors at stop time are reported in the result, never raised
mid-stream.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

EVENT_KINDS = ("tag", "copy", "gen", "restart", "done")  # restart: what came before is void (window_retry.py)
STOP_REASONS = ("eos", "max_tokens", "cancel", "complete", "error", "loop")


@dataclass(frozen=True, kw_only=True)
class DecodeMetrics:
    """What one decode cost, the same record for every strategy ("cad", "ar", "pld").

    Counts from after the prompt prefill (`forwards`, `wall_seconds`); the prefill's own time is
    `prefill_seconds`. `output_tokens` is the canonical token count of the output (what plain
    decoding of it produces), so `tokens_per_second` = output_tokens / wall_seconds compares
    strategies. Fields that belong to one strategy only are None for the others and left out of
    `to_dict()` (the JSON the CLI, the study and storage write is unchanged by this record).
    """

    tokens_copied: int           # tokens that entered the cache through copies (cad)
    tokens_generated: int        # tokens the model chose inside gens (cad) / all output tokens (ar, pld)
    tokens_tag: int              # program tag tokens, forced ones included (cad)
    forwards: int                # model forward passes after the prompt prefill
    wall_seconds: float          # seconds from after the prefill to the end
    prefill_seconds: float       # the prompt prefill's seconds
    tokens_per_second: float     # output_tokens / wall_seconds
    jump_forward_tokens: int     # forced tag tokens that cost no decode step (cad)
    boundary_retokenized: int    # copy joins whose tag tokens were re-tokenised (cad)
    retokenized_tokens: int | None = None     # tag tokens rolled back at those joins (cad only)
    accepted_draft_tokens: int   # prompt-lookup drafts accepted (pld)
    draft_tokens: int | None = None           # prompt-lookup drafts checked (ar, pld, cad-hybrid)
    tag_drafts_accepted: int | None = None    # chosen tag tokens accepted from drafts: steps saved (cad)
    output_tokens: int           # canonical token count of the output
    program_tokens: int | None = None         # tag + gen tokens of the program (cad only)
    copies: int | None = None                 # copy ops in the final program (cad only)
    prompt_tokens: int           # tokens of the prompt
    prompt_reused_tokens: int | None = None   # of them, positions the last run left in the cache (PromptReuse)
    copied_rest: str | None = None            # "A-B": input lines copied after the model ended early (cad, early_end.py)
    noop_refused: int = 0                     # tokens refused by the no-op rule (cad, noop_guard.py)
    shape_refused: int = 0                    # tokens refused to keep the instruction's shape (cad, shape_guard.py)
    backward_refused: int = 0                 # tokens refused: a copy going back (cad, copy_order_guard.py)
    past_end_refused: int = 0                 # tokens refused: a second item past the input's end (cad, same)
    decode_step_seconds: float | None = None  # median wall seconds of this run's one-token forwards
    decode_steps: int | None = None           # how many one-token forwards this run made
    requests: int | None = None               # completion requests to a server (remote engines only)
    first_chunk_seconds: float | None = None  # median seconds from a request to its first chunk (remote)
    server_completion_tokens: int | None = None  # the server's own count of generated tokens (remote)
    search_candidates: int | None = None      # likelihood search: programs decoded (search.py)
    search_seconds: float | None = None       # their decode + prefill seconds, all of them
    search_branch: int | None = None          # the winner's branch point (None: the greedy program)
    written_by: str | None = None             # model mode: "snippet aligner" when backend/core/snippet_apply.py wrote the edit
    aligner_declined: str | None = None       # model mode: why the aligner left a snippet to the model
    window: str | None = None                 # model mode, input over the context: the lines edited (windowed.py)
    window_retry: str | None = None           # why a first, larger window's edit was abandoned (window_retry.py)
    retry_seconds: float | None = None        # that first try's prefill + decode seconds (not in wall_seconds)

    @staticmethod
    def step_timing(step_seconds: Sequence[float]) -> dict[str, Any]:
        """decode_step_seconds / decode_steps from a cache's `step_seconds` list."""
        return {"decode_step_seconds": statistics.median(step_seconds) if step_seconds else None,
                "decode_steps": len(step_seconds)}

    def to_dict(self) -> dict[str, Any]:
        """The metrics as a plain dict, in field order, without the fields that do not apply."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class DecodeEvent:
    kind: str            # "tag" | "copy" | "gen" | "draft" (prompt-lookup tokens accepted) | "restart" | "done"
    text: str            # text this event adds: tag text, copied text, generated text; "" for done
    tokens: int          # tokens this event adds (copy: copied tokens entering the cache)
    forwards: int        # cumulative model forward passes so far
    elapsed: float       # seconds since the strategy started (after prompt prefill)
    result: "DecodeResult | None" = None   # set on kind == "done" only


@dataclass(frozen=True)
class DecodeResult:
    strategy: str        # "cad" | "ar" | "pld"
    mode: str            # "model" | "reference"
    output: str          # resolved output text (for cad: resolve_program(program, source))
    program: str | None  # cad only
    partial: bool        # True when stopped by max tokens, cancel or a detected loop
    stop_reason: str     # one of STOP_REASONS: "eos" | "max_tokens" | "cancel" | "complete" | "error" | "loop"
    error: str | None    # e.g. invalid program at stop (partial) — never raised mid-stream
    metrics: DecodeMetrics
    choices: tuple[Any, ...] = ()  # model mode with search: every decision (decode_run.Choice)
