"""One request contract for every entry point (web app, its API, the command line, the engine).

`check_request(...)` turns raw values into a frozen `EditRequest` or raises `EditError` with a
one-line message that says what to change. The limits live here and only here (`EditLimits`);
`EditEngine.prepare` then tokenises the prompt once and checks the context, and `run` trusts the
prepared request. Pure Python (no torch): the app validates before any model is loaded.

Rejected, with the reason in the message: a value of the wrong type; text that is not valid
Unicode (a lone surrogate such as U+D800 cannot be encoded, so no tokenizer can read it); an
unknown strategy or mode; reference mode without a target; sizes over the limits; a token count
that is not a whole number (12.5, NaN, inf, True are refused, never truncated); a temperature or
top-p that is not a finite number in range; a prompt-lookup setting outside 1-8 n-grams, 1-256 drafts; and, at entry points (`EditLimits.entry_point`), an
empty input or a blank instruction in model mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from backend.core.lines import line_count
from backend.runtime.prompt_lookup import DEFAULT_LOOKUP, MAX_DRAFTS, MAX_NGRAM

STRATEGIES = ("cad", "ar", "pld")
MODES = ("model", "reference")


class EditError(ValueError):
    """A request refused before decoding anything; the message says what to change."""


@dataclass(frozen=True)
class EditLimits:
    """The sizes one edit may have. The context check (prompt + output within the model's
    context length) is the engine's, as it needs the tokenizer."""

    max_source_chars: int = 100_000
    max_source_lines: int = 5_000
    max_target_chars: int = 100_000
    max_instruction_chars: int = 20_000  # an update snippet (fast-apply) may be as long as an input
    max_new_tokens: int = 4_096
    default_new_tokens: int = 512
    entry_point: bool = False  # app, API, CLI: refuse an empty input and a blank model-mode instruction

    def describe(self) -> str:
        return (
            f"limits: {self.max_source_chars:,} characters / {self.max_source_lines:,} lines of input, "
            f"{self.max_new_tokens:,} new tokens"
        )


# What the web app serves by default (its command-line flags override each field).
APP_LIMITS = EditLimits(
    max_source_chars=20_000, max_source_lines=1_000, max_target_chars=20_000, max_new_tokens=2_048,
    entry_point=True,
)
# What `python -m backend edit` accepts: the engine's sizes, the entry-point rules.
CLI_LIMITS = EditLimits(entry_point=True)


@dataclass(frozen=True)
class EditRequest:
    """A validated edit. Build it with `check_request`; the engine trusts its fields."""

    source: str
    instruction: str | None
    strategy: str = "cad"
    mode: str = "model"
    target: str | None = None     # reference mode only
    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    lookup: tuple[int, int] = DEFAULT_LOOKUP  # prompt lookup ("pld"): largest n-gram, most draft tokens per forward


def check_text(value: Any, what: str) -> str:
    """`value` if it is a str that UTF-8 can encode; EditError naming `what` otherwise."""
    if not isinstance(value, str):
        raise EditError(f"{what} must be text (str), not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise EditError(
            f"{what} is not valid Unicode text: a lone surrogate U+{ord(value[error.start]):04X} at character "
            f"{error.start + 1:,}; paste the text again or upload it as a UTF-8 file"
        ) from None
    return value


def whole_number(value: Any, what: str) -> int:
    """An int, or a float holding a whole number (a slider sends 64.0); never truncated."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EditError(f"{what} must be a whole number, not {value!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise EditError(f"{what} must be a whole number, not {value!r}")
    return int(value)


def finite_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EditError(f"{what} must be a finite number, not {value!r}")
    return float(value)


def check_source(source: Any, limits: EditLimits, *, what: str = "the input") -> str:
    """The input text within the limits (also what an upload must pass)."""
    source = check_text(source, what)
    if limits.entry_point and not source:
        raise EditError(f"{what} is empty: paste text or upload a file")
    if len(source) > limits.max_source_chars:
        raise EditError(f"{what} has {len(source):,} characters; the limit is {limits.max_source_chars:,}")
    lines = line_count(source)
    if lines > limits.max_source_lines:
        raise EditError(f"{what} has {lines:,} lines; the limit is {limits.max_source_lines:,}")
    return source


def _check_target(target: Any, limits: EditLimits) -> str:
    if target is None or (limits.entry_point and target == ""):
        raise EditError("reference mode needs the desired result (target)")
    target = check_text(target, "the desired result")
    if len(target) > limits.max_target_chars:
        raise EditError(f"the desired result has {len(target):,} characters; the limit is {limits.max_target_chars:,}")
    return target


def _check_instruction(instruction: Any, mode: str, limits: EditLimits) -> str | None:
    if instruction is not None:
        instruction = check_text(instruction, "the instruction")
        if len(instruction) > limits.max_instruction_chars:
            raise EditError(
                f"the instruction has {len(instruction):,} characters; the limit is {limits.max_instruction_chars:,}"
            )
    if limits.entry_point and mode == "model" and not (instruction or "").strip():
        raise EditError("write an instruction (what should change), or use reference mode with a desired result")
    return instruction


def _check_tokens(max_new_tokens: Any, limits: EditLimits) -> int:
    tokens = whole_number(max_new_tokens, "max new tokens")
    if not 1 <= tokens <= limits.max_new_tokens:
        raise EditError(
            f"max new tokens is {tokens:,}; the limit is {limits.max_new_tokens:,}: "
            f"use a positive integer between 1 and {limits.max_new_tokens:,}"
        )
    return tokens


def _check_lookup(lookup: Any) -> tuple[int, int]:
    """Prompt lookup's (n-gram size, draft tokens): whole numbers in 1..8 and 1..256."""
    if not isinstance(lookup, (tuple, list)) or len(lookup) != 2:
        raise EditError(f"prompt lookup setting must be (n-gram size, draft tokens), not {lookup!r}")
    ngram, drafts = whole_number(lookup[0], "prompt lookup n-gram size"), whole_number(lookup[1], "prompt lookup drafts")
    if not 1 <= ngram <= MAX_NGRAM or not 1 <= drafts <= MAX_DRAFTS:
        raise EditError(f"prompt lookup {ngram}-gram/{drafts}: the n-gram size must be 1-{MAX_NGRAM} "
                        f"and the drafts 1-{MAX_DRAFTS}")
    return ngram, drafts


def _check_sampling(temperature: Any, top_p: Any, seed: Any) -> tuple[float, float, int | None]:
    temperature = finite_number(temperature, "temperature")
    if temperature < 0:
        raise EditError(f"temperature must be >= 0, not {temperature!r}")
    top_p = finite_number(top_p, "top-p")
    if not 0.0 < top_p <= 1.0:
        raise EditError(f"top-p must be in (0, 1], not {top_p!r}")
    if seed is not None:
        seed = whole_number(seed, "seed")
    return temperature, top_p, seed


def check_request(
    source: Any,
    instruction: Any,
    *,
    strategy: Any = "cad",
    mode: Any = "model",
    target: Any = None,
    max_new_tokens: Any = None,
    temperature: Any = 0.0,
    top_p: Any = 1.0,
    seed: Any = None,
    lookup: Any = DEFAULT_LOOKUP,
    limits: EditLimits = EditLimits(),
) -> EditRequest:
    """The validated request (see the module docstring for what is refused). Changes no state.
    `max_new_tokens=None` takes the limits' default."""
    if strategy not in STRATEGIES:
        raise EditError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if mode not in MODES:
        raise EditError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    source = check_source(source, limits)
    instruction = _check_instruction(instruction, mode, limits)
    target = _check_target(target, limits) if mode == "reference" else None
    if max_new_tokens is None:
        max_new_tokens = min(limits.default_new_tokens, limits.max_new_tokens)
    tokens = _check_tokens(max_new_tokens, limits)
    temperature, top_p, seed = _check_sampling(temperature, top_p, seed)
    return EditRequest(source, instruction, strategy, mode, target, tokens, temperature, top_p, seed,
                       _check_lookup(lookup))
