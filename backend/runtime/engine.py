"""The edit engine: one loaded model, three strategies, two modes, one run at a time.

The service the UI and the command line call. It knows which prompt each strategy needs and how to
replay a reference, and nothing about widgets or storage:

    engine = EditEngine(load_model("smollm2-135m"))
    for event in engine.run(source, instruction, strategy="cad"):      # "cad" | "ar" | "pld"
        ...                                                             # tag / copy / gen, then done
    result = engine.run_to_result(source, instruction, strategy="ar", mode="reference", target=target)

Modes:
- "model": the model writes the answer. cad: `decode_program` under the FSM; ar / pld:
  `decode_plain` / `decode_prompt_lookup` with the plain prompt (answer = the whole edited text).
- "reference": the desired `target` is given. cad: the oracle program of (source, target) under the
  "cost" objective, tokenised by this model's tokenizer, forced through the model; ar / pld: the
  target's tokens forced through plain / prompt-lookup decoding. All three produce the target
  exactly: the mechanism's speed with perfect spans.

A lock makes runs on one engine (one model) never overlap: a second `run` waits for the first to
finish, so timings are not disturbed. The lock is held from the first event to the done event
(or until the consumer closes the generator).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from backend.core.lines import line_count
from backend.core.oracle import oracle_program
from backend.runtime.baselines import decode_plain, decode_prompt_lookup, replay_plain, replay_prompt_lookup
from backend.runtime.decoder import decode_program, encode_text, grammar_for
from backend.runtime.events import DecodeEvent, DecodeResult
from backend.runtime.kv import SequenceCache
from backend.runtime.prompt import plain_prompt_ids, program_prompt_ids, reference_program

STRATEGIES = ("cad", "ar", "pld")
MODES = ("model", "reference")


class EditError(ValueError):
    """A request the engine refuses before decoding anything; the message says what to change."""


@dataclass(frozen=True)
class EditLimits:
    """Input limits (configurable; the UI shows the messages as they are).

    The context check is separate: prompt + expected output must fit the model's context length.
    """

    max_source_chars: int = 100_000
    max_source_lines: int = 5_000
    max_target_chars: int = 100_000
    max_instruction_chars: int = 2_000
    max_new_tokens: int = 4_096


class EditEngine:
    """Runs edits on one loaded model. Thread-safe: runs are serialised by one lock."""

    def __init__(self, loaded: Any, *, limits: EditLimits = EditLimits()) -> None:
        if getattr(loaded, "tokenizer", None) is None:
            raise EditError(f"model {getattr(loaded, 'name', '?')} has no tokenizer: it can time kernels only")
        self.loaded = loaded
        self.limits = limits
        self.lock = threading.Lock()
        self._step_seconds: float | None = None
        self._text_tokenizer: Any = None

    @property
    def name(self) -> str:
        return self.loaded.spec.name

    @property
    def context_length(self) -> int:
        return int(self.loaded.spec.context_length)

    # -- tokenizer helpers --------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as plain text (special-token strings stay text)."""
        return encode_text(self.loaded.tokenizer, text)

    def text_tokenizer(self) -> Any:
        """This model's tokenizer as a `tokenize(text) -> pieces` callable for the core's oracle."""
        if self._text_tokenizer is None:
            from backend.tokenizers import TextTokenizer

            grammar = grammar_for(self.loaded)
            self._text_tokenizer = TextTokenizer(self.name, self.encode, grammar.token_bytes)
        return self._text_tokenizer

    def reference_program(self, source: str, target: str) -> str:
        """The program reference replay forces: the oracle's "cost" program of (source, target),
        in the decoding layout (`backend.runtime.prompt.reference_program`)."""
        ops = oracle_program(source, target, objective="cost", tokenize=self.text_tokenizer())
        return reference_program(ops)

    # -- validation ---------------------------------------------------------------------------

    def validate(
        self,
        source: Any,
        instruction: Any,
        *,
        strategy: str = "cad",
        mode: str = "model",
        target: Any = None,
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> None:
        """Rejects (EditError) what `run` cannot do: a non-str source / instruction / target, an
        unknown strategy or mode, reference mode without a target, sizes over the limits, bad
        sampling settings, and a prompt plus expected output longer than the model's context.
        Changes no state."""
        limits = self.limits
        if not isinstance(source, str):
            raise EditError(f"the input must be text (str), not {type(source).__name__}")
        if instruction is not None and not isinstance(instruction, str):
            raise EditError(f"the instruction must be text (str), not {type(instruction).__name__}")
        if strategy not in STRATEGIES:
            raise EditError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
        if mode not in MODES:
            raise EditError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
        if mode == "reference":
            if target is None:
                raise EditError("reference mode needs the desired result (target)")
            if not isinstance(target, str):
                raise EditError(f"the desired result must be text (str), not {type(target).__name__}")
            if len(target) > limits.max_target_chars:
                raise EditError(
                    f"the desired result has {len(target):,} characters; the limit is {limits.max_target_chars:,}"
                )
        if len(source) > limits.max_source_chars:
            raise EditError(f"the input has {len(source):,} characters; the limit is {limits.max_source_chars:,}")
        lines = line_count(source)
        if lines > limits.max_source_lines:
            raise EditError(f"the input has {lines:,} lines; the limit is {limits.max_source_lines:,}")
        if instruction is not None and len(instruction) > limits.max_instruction_chars:
            raise EditError(
                f"the instruction has {len(instruction):,} characters; the limit is {limits.max_instruction_chars:,}"
            )
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
            raise EditError(f"max new tokens must be a positive integer, not {max_new_tokens!r}")
        if max_new_tokens > limits.max_new_tokens:
            raise EditError(f"max new tokens is {max_new_tokens:,}; the limit is {limits.max_new_tokens:,}")
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise EditError(f"temperature must be >= 0, not {temperature!r}")
        if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
            raise EditError(f"top-p must be in (0, 1], not {top_p!r}")
        self._check_context(source, instruction, strategy, mode, target, max_new_tokens)

    def _check_context(
        self, source: str, instruction: str | None, strategy: str, mode: str, target: str | None, max_new_tokens: int
    ) -> None:
        tokenizer = self.loaded.tokenizer
        if strategy == "cad":
            prompt = len(program_prompt_ids(tokenizer, source, instruction))
            # the cache holds the program's tags and gens plus every copied line
            output = len(self.encode(target)) if mode == "reference" else max_new_tokens + len(self.encode(source))
        else:
            prompt = len(plain_prompt_ids(tokenizer, source, instruction))
            output = len(self.encode(target)) if mode == "reference" else max_new_tokens
        if prompt + output > self.context_length:
            raise EditError(
                f"too long for {self.name}: the prompt is {prompt:,} tokens and the output may need {output:,}, "
                f"but the context holds {self.context_length:,}; shorten the input"
                + (" or lower max new tokens" if mode == "model" else "")
            )

    # -- running ------------------------------------------------------------------------------

    def run(
        self,
        source: str,
        instruction: str | None,
        *,
        strategy: str = "cad",
        mode: str = "model",
        target: str | None = None,
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[DecodeEvent]:
        """Events of one edit (tag / copy / gen, then done with the DecodeResult).

        Validates at once (EditError, see `validate`); decoding starts at the first `next()`,
        after waiting for any other run on this engine. Reference mode ignores max_new_tokens
        and the sampling settings (the target fixes every token).
        """
        self.validate(
            source, instruction, strategy=strategy, mode=mode, target=target,
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
        )
        return self._locked(
            source, instruction, strategy, mode, target, max_new_tokens, float(temperature), float(top_p), seed, cancel
        )

    def _locked(self, *args: Any) -> Iterator[DecodeEvent]:
        with self.lock:
            yield from self._events(*args)

    def _events(
        self,
        source: str,
        instruction: str | None,
        strategy: str,
        mode: str,
        target: str | None,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
        cancel: threading.Event | None,
    ) -> Iterator[DecodeEvent]:
        loaded, tokenizer = self.loaded, self.loaded.tokenizer
        if mode == "reference":
            assert target is not None
            if strategy == "cad":
                program = self.reference_program(source, target)
                return decode_program(
                    loaded, source, instruction, max_new_tokens=None, cancel=cancel, force_program=program
                )
            prompt = plain_prompt_ids(tokenizer, source, instruction)
            replay = replay_plain if strategy == "ar" else replay_prompt_lookup
            return replay(loaded, prompt, self.encode(target), cancel=cancel)
        if strategy == "cad":
            return decode_program(
                loaded, source, instruction, max_new_tokens=max_new_tokens, temperature=temperature,
                top_p=top_p, seed=seed, cancel=cancel,
            )
        prompt = plain_prompt_ids(tokenizer, source, instruction)
        decode = decode_plain if strategy == "ar" else decode_prompt_lookup
        return decode(
            loaded, prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
            cancel=cancel,
        )

    def run_to_result(self, source: str, instruction: str | None, **options: Any) -> DecodeResult:
        """`run` without streaming: its DecodeResult (same options, same errors)."""
        for event in self.run(source, instruction, **options):
            if event.kind == "done":
                assert event.result is not None
                return event.result
        raise RuntimeError("the strategy ended without a done event")

    # -- timing -------------------------------------------------------------------------------

    def step_seconds(self, *, context_tokens: int = 512, warmup: int = 3, steps: int = 7) -> float:
        """Measured seconds of one plain decode step of this model on this machine (median of
        `steps` steps after `warmup`, at a context of `context_tokens`), measured once and cached.
        The UI multiplies it by the output's token count to estimate plain decoding's time."""
        if self._step_seconds is None:
            with self.lock:
                if self._step_seconds is None:
                    self._step_seconds = self._measure_step(context_tokens, warmup, steps)
        return self._step_seconds

    def _measure_step(self, context_tokens: int, warmup: int, steps: int) -> float:
        size = min(int(self.loaded.vocab_size), len(self.loaded.tokenizer))
        length = max(1, min(context_tokens, self.context_length - warmup - steps - 1))
        # Ordinary (non-special) ids; timing does not depend on which tokens they are.
        ids = [1000 + (i * 7919) % (size - 1000) for i in range(length)] if size > 2000 else [i % size for i in range(length)]
        cache = SequenceCache(self.loaded.model)
        cache.append_span(ids)
        samples = []
        token = ids[-1]
        for index in range(warmup + steps):
            started = time.perf_counter()
            logits = cache.step(token)
            token = int(logits.argmax())
            if index >= warmup:
                samples.append(time.perf_counter() - started)
        return statistics.median(samples)
