"""Baselines through the same model and cache code: plain decoding and prompt-lookup decoding.

Each takes a LoadedModel and the prompt as token ids (the prompt module builds them) and is a
generator of DecodeEvents ending with one "done" event carrying the DecodeResult:

    decode_plain          one model forward per output token                 (strategy "ar")
    decode_prompt_lookup  n-gram drafts from prompt + output, checked in one
                          forward; greedy output == decode_plain's output     (strategy "pld")
    replay_plain          the target forced one token per forward             (mode "reference")
    replay_prompt_lookup  drafts accepted while they match the target         (mode "reference")

One loop (`_decode`) serves all four. Invariant: the cache holds prompt + output[:-1]; the last
output token is "pending" and enters the cache at the front of the next forward, together with
the drafts to check (as transformers' assisted decoding does), so a plain step and a draft check
cost one forward each. `forwards` and `elapsed` count from after the prompt prefill; the
prefill's own time is metrics.prefill_seconds. A reference replay also runs the forward after
the last target token (the one that would predict EOS), so its forward count equals that of a
model that decodes exactly the target and stops.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from backend.runtime.events import DecodeEvent, DecodeMetrics, DecodeResult
from backend.runtime.handle import DecodeCache, ModelHandle, prefill_prompt
from backend.runtime.prompt_lookup import NgramIndex, prompt_lookup_candidates
from backend.runtime.sampling import make_generator, sample_token

__all__ = [
    "decode_plain", "decode_prompt_lookup", "prompt_lookup_candidates", "replay_plain", "replay_prompt_lookup",
    "run_to_result",
]

# Choose the token at output position `index` from logits [V]; None = the target has ended.
Chooser = Callable[[Any, int], "int | None"]
# Draft tokens given prompt + output so far and how many drafts may be checked.
Drafter = Callable[[list[int], int], list[int]]


class _Detokenizer:
    """Incremental text of a growing token list; holds back a trailing partial UTF-8 character."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def text(self) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(self.ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def add(self, ids: Sequence[int]) -> str:
        self.ids.extend(ids)
        full = self.text()
        if full.endswith("\ufffd"):
            return ""
        return self.flush(full)

    def flush(self, full: str | None = None) -> str:
        full = self.text() if full is None else full
        new = full[len(self.emitted):] if full.startswith(self.emitted) else ""
        self.emitted = full if full.startswith(self.emitted) else self.emitted
        return new


@dataclass
class _BaselineRun:
    """What the steps of one plain / prompt-lookup decode share (the cache, output and counters)."""

    prompt: list[int]
    cache: DecodeCache
    detok: _Detokenizer
    prefill_seconds: float
    started: float             # after the prompt prefill: `forwards` and `elapsed` count from here
    base_forwards: int         # cache.forwards after the prompt prefill (the prefill is not counted)
    base_steps: int            # len(cache.step_seconds) after the prompt prefill
    prompt_reused: int = 0     # prompt positions a previous run left in the cache (handle.PromptReuse)
    output: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted_drafts: int = 0

    def forwards(self) -> int:
        return self.cache.forwards - self.base_forwards

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def _decode(
    loaded: ModelHandle,
    prompt_ids: Sequence[int],
    *,
    strategy: str,
    mode: str,
    choose: Chooser,
    draft: Drafter | None,
    max_new_tokens: int | None,
    eos_ids: Sequence[int],
    cancel: threading.Event | None,
) -> Iterator[DecodeEvent]:
    """The shared loop: prefill, then one forward per iteration (pending token + drafts)."""
    prompt = _checked_prompt(prompt_ids, max_new_tokens)
    eos = set(int(t) for t in eos_ids)
    run, produced = _prefilled_run(loaded, prompt, choose, cancel)
    stop_reason = None if produced else "cancel"  # nothing produced: cancelled during the prefill
    drafted_from = 0  # how many of `produced` are accepted drafts (the first ones of a drafting forward)
    while True:
        # 1. take the tokens the last forward produced (stop at the end of target, EOS or max tokens)
        taken, taken_stop = _take_produced(produced, len(run.output), eos, max_new_tokens)
        stop_reason = stop_reason or taken_stop
        run.output += taken
        for kind, tokens in _by_kind(taken, drafted_from):
            yield DecodeEvent(kind, run.detok.add(tokens), len(tokens), run.forwards(), run.elapsed())
        if stop_reason is None and cancel is not None and cancel.is_set():
            stop_reason = "cancel"
        if stop_reason:
            break
        # 2. one forward: the pending token + drafts (logits [1 + k, V]); accept the matching prefix
        produced, drafted_from = _forward_pending(run, choose, draft, max_new_tokens)
    yield from _finish(run, strategy, mode, stop_reason)


def _checked_prompt(prompt_ids: Sequence[int], max_new_tokens: int | None) -> list[int]:
    """The prompt as ints; rejects an empty prompt or a non-positive token cap before any forward."""
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise ValueError("empty prompt")
    if max_new_tokens is not None and max_new_tokens <= 0:
        raise ValueError("max_new_tokens must be positive")
    return prompt


def _prefilled_run(
    loaded: ModelHandle, prompt: list[int], choose: Chooser, cancel: threading.Event | None
) -> tuple[_BaselineRun, list[int | None]]:
    """The handle's cache with the prompt prefilled (timed apart; a `PromptReuse` handle's cache keeps
    the positions the last run shares with this prompt), and the first output token chosen
    from its logits ([] when cancelled during the prefill)."""
    cache = loaded.new_cache()
    detok = _Detokenizer(loaded.tokenizer)
    started = time.perf_counter()
    first, reused = prefill_prompt(cache, prompt, cancel)  # logits [V]; None when cancelled during the prefill
    produced = [choose(first, 0)] if first is not None else []
    prefill_seconds = time.perf_counter() - started
    run = _BaselineRun(prompt=prompt, cache=cache, detok=detok, prefill_seconds=prefill_seconds,
                       started=time.perf_counter(), base_forwards=cache.forwards,
                       base_steps=len(cache.step_seconds), prompt_reused=reused)
    return run, produced


def _take_produced(
    produced: list[int | None], output_length: int, eos: set[int], max_new_tokens: int | None
) -> tuple[list[int], str | None]:
    """The produced tokens that join the output, up to the first stop (end of target, EOS, max
    tokens), and that stop's reason (None: keep decoding)."""
    taken: list[int] = []
    stop_reason = None
    for token in produced:
        if token is None:
            stop_reason = "complete"
        elif token in eos:
            stop_reason = "eos"
        else:
            taken.append(token)
            if max_new_tokens is not None and output_length + len(taken) >= max_new_tokens:
                stop_reason = "max_tokens"
        if stop_reason:
            break
    return taken, stop_reason


def _forward_pending(
    run: _BaselineRun, choose: Chooser, draft: Drafter | None, max_new_tokens: int | None
) -> tuple[list[int | None], int]:
    """One forward of the pending token (+ drafts, if any fit): the tokens it produced and how many
    of them are accepted drafts."""
    pending = run.output[-1]
    room = None if max_new_tokens is None else max_new_tokens - len(run.output) - 1
    drafts = draft(run.prompt + run.output, room if room is not None else 1 << 30) if draft else []
    if room is not None:
        drafts = drafts[:max(room, 0)]
    if not drafts:
        return [choose(run.cache.step(pending), len(run.output))], 0
    return _check_drafts(run, choose, pending, drafts)


def _check_drafts(
    run: _BaselineRun, choose: Chooser, pending: int, drafts: list[int]
) -> tuple[list[int | None], int]:
    """The pending token + drafts in one forward: the chosen tokens up to the first one that differs
    from its draft (plus the one after the last draft when all match); rejected drafts are rolled back."""
    logits = run.cache.append_span_all([pending] + drafts)
    produced: list[int | None] = []
    for i, proposed in enumerate(drafts):
        produced.append(choose(logits[i], len(run.output) + i))
        if produced[-1] != proposed:
            break
    else:
        produced.append(choose(logits[len(drafts)], len(run.output) + len(drafts)))
    hits = len(produced) - 1
    run.cache.rollback(len(drafts) - hits)
    run.drafted += len(drafts)
    run.accepted_drafts += hits
    return produced, hits


def _finish(run: _BaselineRun, strategy: str, mode: str, stop_reason: str) -> Iterator[DecodeEvent]:
    """The held-back text (if any), then the one "done" event carrying the DecodeResult."""
    tail = run.detok.flush()
    if tail:
        yield DecodeEvent("gen", tail, 0, run.forwards(), run.elapsed())
    wall = run.elapsed()
    result = DecodeResult(
        strategy=strategy, mode=mode, output=run.detok.text(), program=None,
        partial=stop_reason in ("max_tokens", "cancel"), stop_reason=stop_reason, error=None,
        metrics=_metrics(run, wall),
    )
    yield DecodeEvent("done", "", 0, run.forwards(), wall, result)


def _metrics(run: _BaselineRun, wall: float) -> DecodeMetrics:
    """The run's counters as DecodeMetrics (baselines copy nothing and emit no tags)."""
    output = run.output
    return DecodeMetrics(
        tokens_copied=0,
        tokens_generated=len(output),
        tokens_tag=0,
        forwards=run.forwards(),
        wall_seconds=wall,
        prefill_seconds=run.prefill_seconds,
        tokens_per_second=len(output) / wall if wall > 0 else 0.0,
        jump_forward_tokens=0,
        boundary_retokenized=0,
        accepted_draft_tokens=run.accepted_drafts,
        draft_tokens=run.drafted,
        output_tokens=len(output),
        prompt_tokens=len(run.prompt),
        prompt_reused_tokens=run.prompt_reused or None,
        **DecodeMetrics.step_timing(run.cache.step_seconds[run.base_steps:]),
    )


def _by_kind(taken: list[int], drafts: int) -> list[tuple[str, list[int]]]:
    """The taken tokens as events: the first `drafts` were drafted by prompt lookup and accepted
    ("draft", shown apart so a user sees what the lookup supplied), the rest the model's own ("gen")."""
    groups = [("draft", taken[:drafts]), ("gen", taken[drafts:])]
    return [(kind, tokens) for kind, tokens in groups if tokens]


def _sampler(temperature: float, top_p: float, seed: int | None) -> Chooser:
    generator = make_generator(seed) if temperature > 0 else None
    return lambda logits, _index: sample_token(logits, temperature, top_p, generator)


def _forced(target_ids: Sequence[int]) -> Chooser:
    target = [int(t) for t in target_ids]
    return lambda _logits, index: target[index] if index < len(target) else None


def _prompt_lookup(max_ngram_size: int, num_pred_tokens: int, eos_ids: Sequence[int]) -> Drafter:
    """prompt_lookup_candidates for one run, by an n-gram index extended with each call's new tokens
    (prompt + output only grows in a run) instead of a scan of the whole sequence per forward."""
    index = NgramIndex(max_ngram_size)

    def drafter(ids: list[int], room: int) -> list[int]:
        nonlocal index
        known = len(index.ids)
        if len(ids) < known or ids[:known] != index.ids:  # not a continuation: index it afresh
            index = NgramIndex(max_ngram_size, ids)
        else:
            index.extend(ids[known:])
        return index.candidates(min(num_pred_tokens, max(room, 1)), eos_ids)

    return drafter


def _eos(loaded: ModelHandle, eos_ids: Sequence[int] | None) -> tuple[int, ...]:
    return tuple(loaded.eos_ids if eos_ids is None else eos_ids)


def decode_plain(
    loaded: ModelHandle,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    cancel: threading.Event | None = None,
    eos_ids: Sequence[int] | None = None,
) -> Iterator[DecodeEvent]:
    """Plain autoregressive decoding: one forward per token (greedy at temperature 0)."""
    return _decode(
        loaded, prompt_ids, strategy="ar", mode="model", choose=_sampler(temperature, top_p, seed), draft=None,
        max_new_tokens=max_new_tokens, eos_ids=_eos(loaded, eos_ids), cancel=cancel,
    )


def decode_prompt_lookup(
    loaded: ModelHandle,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    cancel: threading.Event | None = None,
    eos_ids: Sequence[int] | None = None,
    max_ngram_size: int = 2,
    num_pred_tokens: int = 10,
) -> Iterator[DecodeEvent]:
    """Prompt-lookup decoding (transformers' prompt_lookup_num_tokens): drafts from n-gram matches
    in prompt + output, checked in one forward; each position's token is chosen from the model's
    own logits, so greedy output equals decode_plain's (up to float ties). With sampling, drafts
    are kept while each position's sample equals them (transformers' rule without draft logits)."""
    eos = _eos(loaded, eos_ids)
    return _decode(
        loaded, prompt_ids, strategy="pld", mode="model", choose=_sampler(temperature, top_p, seed),
        draft=_prompt_lookup(max_ngram_size, num_pred_tokens, eos),
        max_new_tokens=max_new_tokens, eos_ids=eos, cancel=cancel,
    )


def replay_plain(
    loaded: ModelHandle, prompt_ids: Sequence[int], target_ids: Sequence[int], *, cancel: threading.Event | None = None
) -> Iterator[DecodeEvent]:
    """The target forced through the model one token per forward (mode "reference")."""
    return _decode(
        loaded, prompt_ids, strategy="ar", mode="reference", choose=_forced(target_ids), draft=None,
        max_new_tokens=None, eos_ids=(), cancel=cancel,
    )


def replay_prompt_lookup(
    loaded: ModelHandle,
    prompt_ids: Sequence[int],
    target_ids: Sequence[int],
    *,
    cancel: threading.Event | None = None,
    max_ngram_size: int = 2,
    num_pred_tokens: int = 10,
) -> Iterator[DecodeEvent]:
    """The target through prompt-lookup decoding: drafts accepted while they match the target."""
    return _decode(
        loaded, prompt_ids, strategy="pld", mode="reference", choose=_forced(target_ids),
        draft=_prompt_lookup(max_ngram_size, num_pred_tokens, loaded.eos_ids),
        max_new_tokens=None, eos_ids=(), cancel=cancel,
    )


def run_to_result(events: Iterator[DecodeEvent]) -> DecodeResult:
    """Drain a strategy's events; its DecodeResult."""
    for event in events:
        if event.kind == "done" and event.result is not None:
            return event.result
    raise RuntimeError("strategy ended without a done event")
