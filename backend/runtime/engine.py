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
- "model" with an update snippet (`... existing code ...` markers) or a unified diff that the
  aligner places with certainty (backend/core/carried_edit.py): the merged text is replayed like a reference, and the
  result says `written_by = "snippet aligner"`; a snippet it will not place goes to the model, and
  the result says why (`aligner_declined`). `align_snippets=False` leaves every edit to the model.
- "model" with an input longer than the context: the model edits a window of it, the lines the
  instruction is most about (backend/core/window.py, backend/runtime/windowed.py; `metrics.window`).

A lock makes runs on one engine (one model) never overlap: a second `run` waits for the first to
finish, so timings are not disturbed. The lock is held from the first event to the done event
(or until the consumer closes the generator).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from backend.core.oracle import oracle_program
from backend.core.carried_edit import SnippetRefused, apply_carried_edit
from backend.core.lines import split_lines
from backend.core.window import (
    SourceWindow, WindowError, best_window, relevance, required_lines, shape_kept, window_instruction,
)
from backend.runtime.baselines import decode_plain, decode_prompt_lookup, replay_plain, replay_prompt_lookup
from backend.runtime.decoder import decode_program, encode_text
from backend.runtime.events import DecodeEvent, DecodeResult
from backend.runtime.grammar import Grammar
from backend.runtime.handle import ModelHandle, PromptReuse
from backend.runtime.prompt import plain_prompt_ids, program_prompt_ids, prompt_style, reference_program
from backend.runtime.search import search_events
from backend.runtime.window_retry import windowed_events
from backend.runtime.windowed import line_costs
from backend.runtime.request import STRATEGIES, EditError, EditLimits, EditRequest, check_request

__all__ = ["STRATEGIES", "ContextFull", "EditEngine", "EditError", "EditLimits", "EditRequest", "PreparedEdit"]

# A windowed copy-as-decode edit keeps this share of the context for its program's tags and gens
# (1,024 of the embedded model's 8,192 tokens: the held-out dev programs need at most ~700).
WINDOW_PROGRAM_SHARE = 8
WINDOW_SLACK = 32  # tokens the per-line estimate may miss (the chat template's joins)
WINDOW_TRIES = 4


class ContextFull(EditError):
    """The prompt and the output it may need do not fit the model's context."""



@dataclass(frozen=True)
class PreparedEdit:
    """A request the engine accepted: validated once, its prompt tokenised once. `run` trusts it."""

    request: EditRequest
    prompt_ids: tuple[int, ...]         # the strategy's prompt (program prompt for cad, plain for ar/pld)
    target_ids: tuple[int, ...] | None  # reference mode, or an aligned snippet: the target's tokens
    aligned_target: str | None = None   # model mode: the update snippet merged by the aligner
    aligner_declined: str | None = None  # model mode: why the aligner left the instruction's snippet to the model
    window: SourceWindow | None = None   # model mode, an input over the context: the lines the model edits
    inner: "PreparedEdit | None" = None  # then the window's own edit, which `run` runs (windowed.py)


class EditEngine:
    """Runs edits on one loaded model. Thread-safe: runs are serialised by one lock."""

    def __init__(self, loaded: ModelHandle, *, limits: EditLimits = EditLimits(), reuse_prompt: bool = False,
                 copy_rest: bool = True, avoid_noops: bool = False, search_branches: int = 0,
                 align_snippets: bool = True, guard_shapes: bool = True, window_inputs: bool = True,
                 forward_copies: bool = True) -> None:
        """`reuse_prompt`: each run starts from the cache the last one left and reads only the part of
        its prompt that differs (`handle.PromptReuse`; for the interactive app). Off by default: a
        measurement wants every prompt read cold. `copy_rest`: a model-written program that ends
        early after a copy gets the rest of the input copied (backend/runtime/early_end.py).
        `avoid_noops`: a model-written program may not hold a no-op item (a gen opening with the
        line a copy would give, a copy starting right after the copy before it;
        backend/runtime/noop_guard.py; off by default: measured, it gains no exact edit).
        `guard_shapes` (model mode): when the instruction fixes which lines are kept, dropped or
        rewritten and where new lines go (a rename, "Delete lines 4-6", "Add `x` after line 9"), the
        program keeps that shape and the model writes the new text (backend/runtime/shape_guard.py).
        `search_branches` (model mode, greedy): that many branches of the greedy program at its least
        certain choices are decoded too and the most probable finished program kept
        (backend/runtime/search.py); it costs about `search_branches + 1` decodes.
        `align_snippets` (model mode): an instruction carrying an update snippet with
        `... existing code ...` markers or a unified diff is merged by alignment
        (backend/core/carried_edit.py) when
        its place is certain, and that edit is replayed with the strategy (copies as prefills for
        cad); otherwise, or when off, the model writes the program. The result says which
        (`metrics.written_by`, `metrics.aligner_declined`). `window_inputs` (model mode): an input
        too long for the context is edited through the window of it the instruction is most likely
        about (backend/core/window.py; `metrics.window` names it); off, it is refused. `forward_copies`
        (model mode): no copy goes back over lines already copied (backend/core/copy_order.py)."""
        if search_branches < 0:
            raise ValueError("search_branches must be >= 0")
        if loaded.tokenizer is None:
            raise EditError(f"model {loaded.name} has no tokenizer: it can time kernels only")
        self.loaded = loaded
        self.decoding: ModelHandle = PromptReuse(loaded) if reuse_prompt else loaded
        self.limits = limits
        self.copy_rest = copy_rest
        self.avoid_noops = avoid_noops
        self.guard_shapes = guard_shapes
        self.forward_copies = forward_copies
        self.search_branches = search_branches
        self.align_snippets = align_snippets
        self.window_inputs = window_inputs
        self.lock = threading.Lock()
        self._step_seconds: float | None = None
        self._text_tokenizer: Any = None
        self._grammar: Grammar | None = None
        self._grammar_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.loaded.spec.name

    @property
    def context_length(self) -> int:
        return int(self.loaded.spec.context_length)

    @property
    def grammar(self) -> Grammar:
        """This model's grammar (FSM + mask tensors), built on first use (~0.3 s) and kept."""
        with self._grammar_lock:
            if self._grammar is None:
                self._grammar = Grammar.for_model(self.loaded)
            return self._grammar

    # -- tokenizer helpers --------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as plain text (special-token strings stay text)."""
        return encode_text(self.loaded.tokenizer, text)

    def text_tokenizer(self) -> Any:
        """This model's tokenizer as a `tokenize(text) -> pieces` callable for the core's oracle."""
        if self._text_tokenizer is None:
            from backend.tokenizers import TextTokenizer

            self._text_tokenizer = TextTokenizer(self.name, self.encode, self.grammar.token_bytes)
        return self._text_tokenizer

    def reference_program(self, source: str, target: str) -> str:
        """The program reference replay forces: the oracle's "cost" program of (source, target),
        in the decoding layout (`backend.runtime.prompt.reference_program`)."""
        ops = oracle_program(source, target, objective="cost", tokenize=self.text_tokenizer())
        return reference_program(ops)

    # -- validation ---------------------------------------------------------------------------

    def validate(self, source: Any, instruction: Any, **options: Any) -> PreparedEdit:
        """The request checked (backend.runtime.request.check_request with this engine's limits),
        tokenised and checked against the context length; EditError says what to change.
        Options: strategy, mode, target, max_new_tokens, temperature, top_p, seed, lookup (prompt
        lookup's (n-gram, drafts)). Changes no state."""
        return self.prepare(check_request(source, instruction, limits=self.limits, **options))

    def prepare(self, request: EditRequest) -> PreparedEdit:
        """Tokenise the request's prompt once and check prompt + expected output fit the context. In
        model mode an input too long for the context is edited through a window of it
        (`prepare_window`) unless `window_inputs` is off."""
        try:
            return self._prepare_whole(request)
        except ContextFull:
            if not (self.window_inputs and request.mode == "model" and len(split_lines(request.source)) > 1):
                raise
            return self.prepare_window(request)

    def _prompt_tokens(self, request: EditRequest) -> int:
        return len(self._prompt_ids(request))

    def _prompt_ids(self, request: EditRequest) -> list[int]:
        tokenizer = self.loaded.tokenizer
        if request.strategy == "cad":
            return program_prompt_ids(tokenizer, request.source, request.instruction, style=prompt_style(self.loaded))
        return plain_prompt_ids(tokenizer, request.source, request.instruction)

    def _prepare_whole(self, request: EditRequest) -> PreparedEdit:
        prompt = self._prompt_ids(request)
        aligned, declined = self._align(request)
        wanted = request.target if aligned is None else aligned
        target = tuple(self.encode(wanted)) if wanted is not None else None
        if target is not None:
            output = len(target)
        elif request.strategy == "cad":  # the cache holds the program's tags and gens plus every copied line
            output = request.max_new_tokens + len(self.encode(request.source))
        else:
            output = request.max_new_tokens
        if len(prompt) + output > self.context_length:
            raise ContextFull(
                f"too long for {self.name}: the prompt is {len(prompt):,} tokens and the output may need {output:,}, "
                f"but the context holds {self.context_length:,}; shorten the input"
                + (" or lower max new tokens" if request.mode == "model" else "")
            )
        return PreparedEdit(request, tuple(prompt), target, aligned, declined)

    def prepare_window(self, request: EditRequest, *, max_lines: int | None = None) -> PreparedEdit:
        """The edit of the window of the input the instruction is most likely about
        (backend/core/window.py), as large as the context allows (and at most `max_lines` lines);
        the same window for every strategy (it is sized for a copy-as-decode context: the lines
        twice, the program's room). EditError when no window holds the lines the instruction names."""
        lines = split_lines(request.source)
        costs = line_costs(self.encode, lines)
        room = self.context_length // WINDOW_PROGRAM_SHARE  # the same for every strategy and budget: the same window
        overhead = self._prompt_tokens(replace(request, source="", strategy="cad"))
        budget = self.context_length - overhead - room - WINDOW_SLACK
        scores, required = relevance(request.instruction, lines), required_lines(request.instruction, lines)
        for _ in range(WINDOW_TRIES):
            try:
                window = best_window(scores, required, costs, budget, max_lines=max_lines)
            except WindowError as error:
                raise EditError(f"too long for {self.name}, and no window of it can be edited: {error}") from None
            inner = self._window_request(request, window, lines, room)
            try:
                prepared = self._prepare_whole(inner)
            except ContextFull:
                budget = budget * 4 // 5  # the estimate was short (long numbers, a location hint): a smaller window
                continue
            if self.guard_shapes and not shape_kept(request.instruction, lines, window, inner.instruction or ""):
                raise EditError(f"too long for {self.name}: the edit's lines do not fit in one window of "
                                f"{window.end - window.start + 1} lines; shorten the input")
            return replace(prepared, request=request, inner=prepared, window=window)
        raise EditError(f"too long for {self.name}: no window of the input fits in its context; shorten the input")

    def _window_request(self, request: EditRequest, window: SourceWindow, lines: Sequence[str], room: int) -> EditRequest:
        """The request as said of the window: its text, its renumbered instruction, and the output
        room left (a copy program's tags and gens, or a plain rewrite of the window)."""
        text = window.split(lines)[1]
        inner = replace(request, source=text, instruction=window_instruction(request.instruction, window))
        if request.strategy == "cad":
            return replace(inner, max_new_tokens=min(request.max_new_tokens, room))
        return replace(inner, max_new_tokens=min(request.max_new_tokens, self.context_length - self._prompt_tokens(inner)))

    def _align(self, request: EditRequest) -> tuple[str | None, str | None]:
        """(merged text, None) when the aligner places the instruction's update snippet or unified
        diff; (None, why) when it carries one the aligner will not place; (None, None) otherwise."""
        if not (self.align_snippets and request.mode == "model" and request.instruction):
            return None, None
        try:
            return apply_carried_edit(request.source, request.instruction), None
        except SnippetRefused as refusal:  # "no snippet": the instruction carries neither a snippet nor a diff
            return None, None if refusal.kind == "no snippet" else str(refusal)

    # -- running ------------------------------------------------------------------------------

    def run(
        self, source: str, instruction: str | None, *, cancel: threading.Event | None = None, **options: Any
    ) -> Iterator[DecodeEvent]:
        """Events of one edit (tag / copy / gen, then done with the DecodeResult).

        Validates at once (EditError, see `validate`; options: strategy, mode, target,
        max_new_tokens, temperature, top_p, seed); decoding starts at the first `next()`, after
        waiting for any other run on this engine. Reference mode ignores max_new_tokens and the
        sampling settings (the target fixes every token).
        """
        return self.run_prepared(self.validate(source, instruction, **options), cancel=cancel)

    def run_prepared(self, prepared: PreparedEdit, *, cancel: threading.Event | None = None) -> Iterator[DecodeEvent]:
        """`run` for a request `prepare` accepted: no second validation or tokenisation."""
        return self._locked(prepared, cancel)

    def _locked(self, prepared: PreparedEdit, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        with self.lock:
            if prepared.inner is not None and prepared.window is not None:
                yield from windowed_events(self, prepared, cancel)
            else:
                yield from self._events(prepared, cancel)

    def decode_prepared(self, prepared: PreparedEdit, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        """The events of one prepared (unwindowed) edit, without the engine's lock."""
        return self._events(prepared, cancel)

    def _events(self, prepared: PreparedEdit, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        if prepared.aligned_target is not None:
            return _labelled(self._replay(prepared, prepared.aligned_target, cancel), written_by="snippet aligner")
        if prepared.aligner_declined is not None:
            return _labelled(self._decode(prepared, cancel), aligner_declined=prepared.aligner_declined)
        return self._decode(prepared, cancel)

    def _decode(self, prepared: PreparedEdit, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        request = prepared.request
        if request.mode == "reference":
            assert request.target is not None
            return self._replay(prepared, request.target, cancel)
        return self._model_events(prepared, cancel)

    def _replay(self, prepared: PreparedEdit, target: str, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        """The strategy forced to produce `target` (reference replay: every token is fixed)."""
        loaded, request = self.decoding, prepared.request
        source, instruction = request.source, request.instruction
        assert prepared.target_ids is not None
        if request.strategy == "cad":
            program = self.reference_program(source, target)
            return decode_program(
                loaded, source, instruction, max_new_tokens=None, cancel=cancel, force_program=program,
                grammar=self.grammar, prompt_ids=prepared.prompt_ids,
            )
        if request.strategy == "ar":
            return replay_plain(loaded, list(prepared.prompt_ids), list(prepared.target_ids), cancel=cancel)
        return replay_prompt_lookup(loaded, list(prepared.prompt_ids), list(prepared.target_ids), cancel=cancel,
                                    max_ngram_size=request.lookup[0], num_pred_tokens=request.lookup[1])

    def _model_events(self, prepared: PreparedEdit, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        """The model writes the edit: a program under the grammar (cad) or the whole text (ar, pld)."""
        loaded, request = self.decoding, prepared.request
        source, instruction = request.source, request.instruction
        temperature, top_p, seed = request.temperature, request.top_p, request.seed
        if request.strategy == "cad":
            searching = bool(self.search_branches) and temperature == 0
            # a search's runs share one prompt: each branch keeps the prompt the run before left in the cache
            handle = PromptReuse(loaded) if searching and not isinstance(loaded, PromptReuse) else loaded

            def decode(decisions: Sequence[int] = (), trace: bool = False) -> Iterator[DecodeEvent]:
                return decode_program(
                    handle, source, instruction, max_new_tokens=request.max_new_tokens, temperature=temperature,
                    top_p=top_p, seed=seed, cancel=cancel, grammar=self.grammar, prompt_ids=prepared.prompt_ids,
                    copy_rest=self.copy_rest, avoid_noops=self.avoid_noops, guard_shapes=self.guard_shapes,
                    forward_copies=self.forward_copies,
                    trace=trace, decisions=decisions,
                )
            if searching:
                return search_events(lambda decisions: decode(decisions, trace=True), self.search_branches)
            return decode()
        if request.strategy == "ar":
            return decode_plain(loaded, list(prepared.prompt_ids), max_new_tokens=request.max_new_tokens,
                                temperature=temperature, top_p=top_p, seed=seed, cancel=cancel)
        return decode_prompt_lookup(
            loaded, list(prepared.prompt_ids), max_new_tokens=request.max_new_tokens, temperature=temperature,
            top_p=top_p, seed=seed, cancel=cancel, max_ngram_size=request.lookup[0], num_pred_tokens=request.lookup[1],
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
        cache = self.loaded.new_cache()
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


def _labelled(events: Iterator[DecodeEvent], *, written_by: str | None = None,
              aligner_declined: str | None = None) -> Iterator[DecodeEvent]:
    """`events` with the done event's metrics marked (who wrote the edit, why the aligner declined)."""
    for event in events:
        if event.kind == "done" and event.result is not None:
            metrics = replace(event.result.metrics, written_by=written_by, aligner_declined=aligner_declined)
            result = replace(event.result, mode="model", metrics=metrics)
            event = replace(event, result=result)
        yield event
