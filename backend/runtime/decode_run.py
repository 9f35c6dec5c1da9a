"""The state one constrained decode shares between the decoder's steps (`backend.runtime.decoder`).

`DecodeRun` is the small state object of the decode ladder: the cache, the FSM state, what waits to
enter the cache at the next forward (`pending`), the program so far and the counts; `Counts` is
what the metrics report about program tokens, joins and jump-forward.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from backend.core.fsm import TokenFSM
from backend.core.fsm_state import FSMState
from backend.core.line_shape import LineShape
from backend.core.lines import split_lines
from backend.core.program import Op
from backend.runtime.events import DecodeEvent
from backend.runtime.grammar import Grammar
from backend.runtime.handle import DecodeCache
from backend.runtime.hybrid import Drafting
from backend.runtime.loop_guard import LoopGuard
from backend.runtime.program_text import ForcedProgram, ProgramStream


@dataclass(frozen=True)
class Choice:
    """One decision of a model-mode run (search.py): the token taken and its log-probability under
    the grammar's mask, and the best other token the mask allowed (None when it allowed one)."""

    token: int
    log_prob: float
    runner_up: int | None
    runner_up_log_prob: float

    @property
    def margin(self) -> float:
        """How much likelier the taken token was than the runner-up (inf when there was none)."""
        return self.log_prob - self.runner_up_log_prob


@dataclass
class Counts:
    """Program tokens by kind, and what the joins and jump-forward did."""

    tag: int = 0
    gen: int = 0
    copied: int = 0
    jump: int = 0
    boundary: int = 0
    boundary_tokens: int = 0
    noop_refused: int = 0  # tokens refused by the no-op rule (noop_guard.py)
    shape_refused: int = 0  # tokens refused to keep the program in the instruction's shape (shape_guard.py)
    backward_refused: int = 0  # tokens refused because the copy would go back (copy_order_guard.py)
    past_end_refused: int = 0  # tokens refused: a second item past the input's last line (copy_order_guard.py)

    @property
    def program(self) -> int:
        return self.tag + self.gen


@dataclass
class DecodeRun:
    """Everything the steps of one decode share. The cache holds prompt + program so far except
    `pending`: tokens decided (chosen, forced, copied) that enter the cache at the next forward."""

    source: str
    tokenizer: Any
    grammar: Grammar
    cache: DecodeCache
    state: FSMState
    max_new_tokens: int | None
    context_length: int | None
    cancel: threading.Event | None = None
    forced: ForcedProgram | None = None
    sampling: tuple[float, float, Any] = (0.0, 1.0, None)  # temperature, top_p, generator
    guard: LoopGuard | None = None
    stream: ProgramStream = field(default_factory=ProgramStream)
    ops: list[Op] = field(default_factory=list)
    program: bytearray = field(default_factory=bytearray)
    pending: list[int] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    stop_reason: str | None = None
    error: str | None = None
    base_forwards: int = 0     # cache.forwards after the prompt prefill
    base_steps: int = 0        # len(cache.step_seconds) after the prompt prefill
    prompt_reused: int = 0     # prompt positions a previous run left in the cache (handle.PromptReuse)
    started: float = 0.0
    drafting: Drafting | None = None  # tag openings and (hybrid) prompt-lookup drafts in gens (hybrid.py)
    copy_rest: bool = False  # model mode: an early end after a copy copies the rest (early_end.py)
    copied_rest: tuple[int, int] | None = None  # the lines that rule copied, when it did
    avoid_noops: bool = False  # model mode: refuse no-op items (noop_guard.py)
    forward_copies: bool = False  # model mode: no copy back over lines already copied (copy_order_guard.py)
    shape: LineShape | None = None  # model mode: the shape the instruction fixes (shape_guard.py)
    decisions: tuple[int, ...] = ()  # search: the run's first choices, replayed (search.py)
    choices: list[Choice] | None = None  # search: every choice with its log-probability (search.py)
    _source_lines: list[str] | None = None

    @property
    def source_lines(self) -> list[str]:
        """The input's lines (lines.split_lines), split once per run."""
        if self._source_lines is None:
            self._source_lines = split_lines(self.source)
        return self._source_lines

    @property
    def fsm(self) -> TokenFSM:
        return self.grammar.fsm

    def choose_unless(self, logits: torch.Tensor, token: int | None, refuses: Callable[[int], bool],
                      limit: int) -> tuple[int | None, int]:
        """The model's choice `token`, or its next choice while a decoding rule `refuses` it (EOS is
        never refused): each refused token's logit is set to -inf in `logits` (masked in place by
        `Grammar.choose`) and the grammar asked again, at most `limit` times; then the choice stands,
        so a rule never stops a decode. Returns (the token, how many were refused)."""
        refusals = 0
        while refusals < limit and token is not None and token != self.grammar.eos_id and refuses(token):
            refusals += 1
            with torch.inference_mode():
                logits[token] = float("-inf")
            token = self.grammar.choose(logits, self.state, *self.sampling)
        return token, refusals

    def stop(self, reason: str, error: str | None = None) -> None:
        self.stop_reason, self.error = reason, error

    def event(self, kind: str, text: str, tokens: int) -> DecodeEvent:
        return DecodeEvent(kind, text, tokens, self.cache.forwards - self.base_forwards, time.perf_counter() - self.started)
