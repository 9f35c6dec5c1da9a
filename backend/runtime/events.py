"""The one record every decoding strategy yields; the UI and the benchmarks both consume it.

A strategy is a generator of `DecodeEvent`s ending with exactly one `kind == "done"` event whose
`result` is the `DecodeResult`. Errors at stop time are reported in the result, never raised
mid-stream.
"""

from __future__ import annotations

from dataclasses import dataclass

EVENT_KINDS = ("tag", "copy", "gen", "done")
STOP_REASONS = ("eos", "max_tokens", "cancel", "complete", "error")


@dataclass(frozen=True)
class DecodeEvent:
    kind: str            # "tag" | "copy" | "gen" | "done"
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
    partial: bool        # True when stopped by max tokens or cancel
    stop_reason: str     # "eos" | "max_tokens" | "cancel" | "complete" | "error"
    error: str | None    # e.g. invalid program at stop (partial) — never raised mid-stream
    metrics: dict        # tokens_copied, tokens_generated, tokens_tag, forwards, wall_seconds,
                         # prefill_seconds, tokens_per_second, jump_forward_tokens, boundary_retokenized,
                         # accepted_draft_tokens (pld), output_tokens
