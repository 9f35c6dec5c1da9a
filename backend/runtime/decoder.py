"""The constrained decoder: the model writes a copy-as-decode program under the token FSM.

`decode_program` is a generator of `DecodeEvent`s (tag / copy / gen, then one done event whose
result is the `DecodeResult`), like nanochat's engine: every token says whether it was chosen by
the model or forced (jump-forward, reference replay), and a non-streaming wrapper drains it.

The loop (`_decode`) is a ladder of small steps over one `DecodeRun` (gpt-fast style):

    should_stop     cancel, max_new_tokens, a detected loop
    forward_pending the tokens decided since the last forward enter the cache in ONE forward
                    (append_span); a full context stops the run
    next_token      the forced program's next token, or the model's choice under the grammar mask
                    (`Grammar.choose`: greedy / seeded temperature + top-p); EOS stops the run
    take_token      TokenFSM.advance; the token joins `pending` and yields its tag / gen events
    jump_forward    where the grammar forces text (`forced_text`: after `<copy` the rest ` lines="`,
                    after `"` the `/>`), its tokens join `pending` too: no decode step is spent
    complete_ops    a completed copy tag: the copied lines join `pending` (`join_copy`), tokenised
                    as one block with the tag's last tokens; every completed op goes to the loop guard

So a sampled token, the forced text after it and a copy it completes cost one forward together.
Without jump-forward each forced token is a decode step: `jump_forward_tokens` counts those saved.

Context layout (DESIGN.md): prompt, then the program as emitted, with each copy's text right after
its tag's closing `"/>` (see `backend.runtime.prompt`). Tokens that would put program text between
a copy tag and its copied text are masked out where a copy tag can close (`grammar.Grammar`). The
one join algorithm (`join_copy`): the tag's last two tokens and the copied text are tokenised
together; if that changes the tag's tokens they are dropped (from `pending`, or rolled back from
the cache) and re-entered in the same forward (`boundary_retokenized` counts such joins). A join
between two copies never happens: a tag always separates them.

Reference mode (`force_program`): the program text is forced token by token (canonical tokenisation,
item by item); jump-forward segments and copies go through one forward each as in model mode.

Model mode stops a looping program early (`loop_guard.LoopGuard`: stop_reason "loop", partial).

Counting, as the baselines count: `forwards` and `elapsed` start after the prompt prefill (its time
is `prefill_seconds`); a reference replay ends with the forward after the last program token (the
one that would predict EOS). `max_new_tokens` bounds the program tokens (sampled + forced), not
the copied ones. `output_tokens` is the canonical token count of the resolved output, the same
number plain decoding of that output would produce, so `tokens_per_second` compares strategies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import torch

from backend.core.lines import line_count
from backend.core.program import CopyLines, Gen, Op
from backend.core.resolve import resolve_program
from backend.runtime.decode_run import DecodeRun
from backend.runtime.events import DecodeEvent, DecodeMetrics, DecodeResult
from backend.runtime.grammar import Grammar
from backend.runtime.handle import ModelHandle, prefill_prompt
from backend.runtime.hybrid import Drafting
from backend.runtime.early_end import copy_tag
from backend.runtime.loop_guard import LoopGuard
from backend.runtime.copy_order_guard import keep_copies_forward
from backend.runtime.noop_guard import refuse_noops
from backend.runtime.shape_guard import keep_shape, program_shape, rest_at_end
from backend.runtime.program_text import ForcedProgram, ProgramStream, check_forced, encode_text, tokenize_before_item
from backend.runtime.prompt_lookup import PromptLookupSetting
from backend.runtime.prompt import program_prompt_ids, prompt_style
from backend.runtime.sampling import make_generator
from backend.runtime.search import traced_choice

# Re-exported: the decoder's text helpers live in program_text, the mask tensors in grammar.
__all__ = ["Grammar", "ProgramStream", "decode_program", "encode_text"]

# Tag tokens re-tokenised together with a copied text at their join. Two cover `"/>` whether it
# came as one token or as `"` + `/>` (jump-forward); digits before it never merge with it (both
# SmolLM2 and Qwen split digits one per token).
JOIN_WINDOW_TOKENS = 2

_WHERE = {"tag": "inside a tag", "first": "inside a copy tag", "last": "inside a copy tag", "gen": "inside a gen"}


# The steps ------------------------------------------------------------------------------


def should_stop(run: DecodeRun) -> bool:
    """Before a forward: a loop already seen, cancel, or max_new_tokens program tokens reached."""
    if run.stop_reason is not None:
        return True
    if run.cancel is not None and run.cancel.is_set():
        run.stop("cancel")
    elif run.max_new_tokens is not None and run.counts.program >= run.max_new_tokens:
        run.stop("max_tokens")
    return run.stop_reason is not None


def forward_pending(run: DecodeRun, logits: torch.Tensor | None) -> torch.Tensor | None:
    """`pending` into the cache in one forward: the new logits [V] (the old ones when nothing is
    pending); None, and the run stopped, when it would overflow the context."""
    if not run.pending:
        return logits
    if run.context_length is not None and run.cache.length + len(run.pending) > run.context_length:
        run.stop("max_tokens", f"the context is full ({run.context_length} tokens)")
        return None
    logits = run.cache.append_span(run.pending)  # ids: [1, len(pending)] -> logits [V]
    run.pending.clear()
    return logits


def next_token(run: DecodeRun, logits: torch.Tensor) -> int | None:
    """The forced program's next token or the model's choice under the mask; None (and the run
    stopped) at the forced program's end, at EOS, or where the grammar allows nothing."""
    if run.forced is not None:
        if run.forced.done:
            run.stop("complete")
            return None
        return run.forced.next_token(run.state)
    if run.choices is not None:
        token = traced_choice(run, logits)
    else:
        temperature, top_p, generator = run.sampling
        token = run.grammar.choose(logits, run.state, temperature, top_p, generator)
        token = refuse_noops(run, logits, token) if run.avoid_noops else token
        token = keep_copies_forward(run, logits, token)  # no copy back over lines already copied
        token = keep_shape(run, logits, token)  # the model's choice unless it breaks the instruction's shape
    if token is None:
        run.stop("error", f"no token allowed in state {run.state.mode!r}")
    elif token == run.grammar.eos_id:
        run.stop("eos")
        return None
    return token


def take_token(run: DecodeRun, token: int) -> list[DecodeEvent]:
    """Advance the FSM by one token and queue it: its events plus those of any op it completes."""
    step = run.fsm.advance(run.state, token)
    run.state = step.state
    raw = run.grammar.token_bytes(token)
    run.pending.append(token)
    run.program.extend(raw)
    kind = "gen" if any(k == "gen" for k, _ in step.pieces) else "tag"
    if kind == "gen":
        run.counts.gen += 1
        if run.guard is not None:
            note_loop(run, run.guard.check_gen(run.state.body))
    else:
        run.counts.tag += 1
    return program_events(run, raw, kind, 1) + complete_ops(run, step.completed)


def jump_forward(run: DecodeRun) -> list[DecodeEvent]:
    """The text the grammar forces after the last token: its tokens join `pending` (no decode
    step); nothing when its tokenisation does not fit the grammar (those chars are decoded)."""
    text = run.fsm.forced_text(run.state)
    if not text:
        return []
    ids = encode_text(run.tokenizer, text)
    probe, completed = run.state, list[Op]()
    try:
        for token in ids:
            step = run.fsm.advance(probe, token)
            probe = step.state
            completed.extend(step.completed)
    except ValueError:
        return []
    if run.forced is not None:
        run.forced.skip(text)
    run.state = probe
    run.pending.extend(ids)
    run.program.extend(text.encode("utf-8"))
    run.counts.tag += len(ids)
    run.counts.jump += len(ids)
    return program_events(run, text.encode("utf-8"), "tag", len(ids)) + complete_ops(run, completed)


def copy_the_rest(run: DecodeRun) -> list[DecodeEvent]:
    """After the model's EOS: when the program ended right after a copy that no copy reached the
    input's end from, append a copy of the rest (backend/runtime/early_end.py); else nothing."""
    if not run.copy_rest or run.forced is not None or run.stop_reason != "eos":
        return []
    rest = rest_at_end(run)
    if rest is None:
        return []
    tag = copy_tag(*rest)
    ids = encode_text(run.tokenizer, tag)
    probe, completed = run.state, list[Op]()
    for token in ids:
        step = run.fsm.advance(probe, token)
        probe = step.state
        completed.extend(step.completed)
    run.state, run.copied_rest = probe, rest
    run.pending.extend(ids)
    run.program.extend(tag.encode("utf-8"))
    run.counts.tag += len(ids)
    return program_events(run, tag.encode("utf-8"), "tag", len(ids)) + complete_ops(run, completed)


def complete_ops(run: DecodeRun, completed: Sequence[Op]) -> list[DecodeEvent]:
    """Record completed ops; a copy's text joins `pending` (one "copy" event each). The loop
    guard sees every op and stops the run when the program repeats itself."""
    out = []
    for op in completed:
        run.ops.append(op)
        if isinstance(op, CopyLines):
            text = resolve_program([op], run.source)
            tokens = join_copy(run, text, followed=op.end < run.state.n_lines)
            run.counts.copied += tokens
            out.append(run.event("copy", text, tokens))
        if run.guard is not None:
            note_loop(run, run.guard.add(op))
    return out


def note_loop(run: DecodeRun, message: str | None) -> None:
    """Stop the run (before its next forward) when the loop guard saw the program repeat itself."""
    if message is not None and run.stop_reason is None:
        run.stop("loop", message)


def join_copy(run: DecodeRun, text: str, *, followed: bool = False) -> int:
    """Put copied text into `pending`, tokenised with the tag's last JOIN_WINDOW_TOKENS tokens;
    the tokens that entered for it (re-tokenised tag tokens included). Tag tokens the joint
    tokenisation changes leave `pending`, or the cache (rolled back), and re-enter with the text.
    `followed`: more program follows the copy (it stops before the input's last line), so its text
    is tokenised as it is in the trained context (`tokenize_before_item`)."""
    window = (run.cache.token_ids[-JOIN_WINDOW_TOKENS:] + run.pending)[-JOIN_WINDOW_TOKENS:]
    window_text = b"".join(run.grammar.token_bytes(t) for t in window).decode("utf-8", "replace")
    joined = (tokenize_before_item(run.tokenizer, window_text + text) if followed
              else encode_text(run.tokenizer, window_text + text))
    keep = 0
    while keep < len(window) and keep < len(joined) and window[keep] == joined[keep]:
        keep += 1
    changed = len(window) - keep
    if changed:
        run.counts.boundary += 1
        run.counts.boundary_tokens += changed
        from_pending = min(changed, len(run.pending))
        del run.pending[len(run.pending) - from_pending:]
        run.cache.rollback(changed - from_pending)
    run.pending.extend(joined[keep:])
    return len(joined) - keep


def program_events(run: DecodeRun, data: bytes, kind: str, tokens: int) -> list[DecodeEvent]:
    """Events for program bytes; the token count goes to the first segment of `kind`."""
    out = []
    for seg_kind, text in run.stream.feed(data):
        share = tokens if seg_kind == kind else 0
        tokens -= share
        out.append(run.event(seg_kind, text, share))
    if tokens:
        out.append(run.event(kind, "", tokens))
    return out


# The decoder ----------------------------------------------------------------------------


def decode_program(
    loaded: ModelHandle,
    source: str,
    instruction: str | None,
    *,
    max_new_tokens: int | None, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
    cancel: threading.Event | None = None,
    force_program: str | None = None,
    grammar: Grammar | None = None,
    prompt_ids: Sequence[int] | None = None,
    hybrid: PromptLookupSetting | None = None,
    tag_drafts: bool = True, copy_rest: bool = False, avoid_noops: bool = False, guard_shapes: bool = False,
    forward_copies: bool = False, trace: bool = False, decisions: Sequence[int] = (),
) -> Iterator[DecodeEvent]:
    """Copy-as-decode: the model writes a program under the FSM; copies enter the cache in one
    forward each. Yields tag / copy / gen events, then one done event with the DecodeResult.

    `force_program` (mode "reference"): that program text is forced instead of sampled.
    `grammar`: the model's Grammar (the engine passes the one it owns; built here when None, ~0.3 s).
    `hybrid` (a prompt-lookup setting): inside gens, drafts checked in the same forward as the
    pending token (backend/runtime/hybrid.py); the output is unchanged, forwards fewer.
    `tag_drafts`: the next item's predicted opening (`<gen>` after a copy, `\n<copy lines="I-` after
    a gen) is checked in the forward that enters the copy or the gen's close (hybrid.py); False
    decodes every chosen tag token in its own step (to measure what the drafts save).
    `prompt_ids`: the program prompt already tokenised (default: `program_prompt_ids`, model's style).
    `copy_rest` / `avoid_noops` / `guard_shapes` / `forward_copies` (model mode): early_end.py, noop_guard.py,
    shape_guard.py, copy_order_guard.py.
    `trace` (model mode, greedy): every choice is recorded with its log-probability and the
    runner-up's (`DecodeResult.choices`); `decisions`: the first choices are these tokens, then
    greedy (search.py branches a run this way; the no-op rule is off in a traced run).
    Stops at EOS ("eos"), the end of a forced program ("complete"), `max_new_tokens` program tokens
    or a full context ("max_tokens", partial), `cancel` ("cancel", partial) or, in model mode, a
    program repeating itself ("loop", partial); a partial program resolves its completed ops plus
    an unclosed gen's text so far. Model misbehaviour never raises mid-stream: it ends the stream
    with stop_reason "error" and the message in `error`.
    Rejects (ValueError, raised by the call itself, before any decoding): max_new_tokens <= 0, a bad temperature or
    top_p, a forced program malformed, holding CopyTokens or empty gens, or not fitting the source; no tokenizer.
    """
    check_settings(max_new_tokens, temperature, top_p, traced=trace or bool(decisions))
    if force_program is not None:
        check_forced(force_program, source)
    grammar = grammar if grammar is not None else Grammar.for_model(loaded)
    tokenizer = loaded.tokenizer
    if prompt_ids is None:
        prompt_ids = program_prompt_ids(tokenizer, source, instruction, style=prompt_style(loaded))
    forced = ForcedProgram(force_program, tokenizer, grammar) if force_program is not None else None
    run = DecodeRun(
        source=source, tokenizer=tokenizer, grammar=grammar, cache=loaded.new_cache(),
        state=grammar.fsm.start(line_count(source)), max_new_tokens=max_new_tokens,
        context_length=loaded.spec.context_length, cancel=cancel, forced=forced,
        sampling=(temperature, top_p, make_generator(seed) if temperature > 0 and forced is None else None),
        guard=LoopGuard() if forced is None else None,
        drafting=Drafting(hybrid, next_token, take_token, jump_forward, tags=tag_drafts),
        copy_rest=copy_rest and forced is None, avoid_noops=avoid_noops and forced is None,
        forward_copies=forward_copies and not (forced or trace or decisions),
        shape=program_shape(source, instruction) if guard_shapes and not (forced or trace or decisions) else None,
        decisions=tuple(decisions), choices=[] if (trace or decisions) and force_program is None else None,
    )
    return _decode(run, list(prompt_ids))


def check_settings(max_new_tokens: int | None, temperature: float, top_p: float, *, traced: bool) -> None:
    """ValueError for settings no decode can run with (before any decoding)."""
    if max_new_tokens is not None and max_new_tokens <= 0:
        raise ValueError("max_new_tokens must be positive")
    if temperature < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"bad sampling settings: temperature={temperature}, top_p={top_p}")
    if traced and temperature > 0:
        raise ValueError("a traced or branched run is greedy: temperature must be 0")


def _decode(run: DecodeRun, prompt: list[int]) -> Iterator[DecodeEvent]:
    """Prefill the prompt, then climb the ladder until a step stops the run."""
    started = time.perf_counter()
    # logits [V], None when cancelled during the prefill; prompt_reused: 0 unless a PromptReuse handle
    logits, run.prompt_reused = prefill_prompt(run.cache, prompt, run.cancel)
    prefill_seconds = time.perf_counter() - started
    run.started, run.base_forwards, run.base_steps = time.perf_counter(), run.cache.forwards, len(run.cache.step_seconds)
    if logits is None:
        run.stop("cancel")
    try:
        while not should_stop(run):
            source, drafts = run.drafting.drafts(run) if run.drafting is not None else ("", [])
            if drafts:  # pending + drafts in one forward (backend/runtime/hybrid.py)
                logits, events = run.drafting.forward(run, source, drafts)  # type: ignore[union-attr]
                yield from events
                continue
            logits = forward_pending(run, logits)
            if logits is None:
                break
            token = next_token(run, logits)
            if token is None:
                break
            yield from take_token(run, token)
            yield from jump_forward(run)
        yield from copy_the_rest(run)  # the model's EOS may come from a tag-draft forward too
    except Exception as exc:  # never raise mid-stream: the error goes into the result
        run.stop("error", f"{type(exc).__name__}: {exc}")
    result = finish(run, prompt_tokens=len(prompt), prefill_seconds=prefill_seconds)
    yield DecodeEvent("done", "", 0, result.metrics.forwards, result.metrics.wall_seconds, result)


def finish(run: DecodeRun, *, prompt_tokens: int, prefill_seconds: float) -> DecodeResult:
    """The DecodeResult of a stopped run: an unfinished program keeps its completed ops and an
    open gen's text so far (partial); an output the resolver refuses is an error."""
    stop_reason, error = run.stop_reason, run.error
    final_ops = list(run.ops)
    if stop_reason not in ("eos", "complete") and not run.fsm.is_complete(run.state):
        if error is None:
            error = f"incomplete program: stopped {_WHERE.get(run.state.mode, 'mid-program')}"
        tail = run.fsm.open_gen_text(run.state)
        if tail:
            final_ops.append(Gen(tail))
            error += " (its text so far is kept)"
    try:
        output = resolve_program(final_ops, run.source)
    except ValueError as exc:
        output, stop_reason = "", "error"
        error = f"{error}; {exc}" if error else str(exc)
    wall = time.perf_counter() - run.started
    output_tokens = len(encode_text(run.tokenizer, output))
    counts = run.counts
    metrics = DecodeMetrics(
        tokens_copied=counts.copied, tokens_generated=counts.gen, tokens_tag=counts.tag,
        forwards=run.cache.forwards - run.base_forwards, wall_seconds=wall, prefill_seconds=prefill_seconds,
        tokens_per_second=output_tokens / wall if wall > 0 else 0.0, jump_forward_tokens=counts.jump,
        boundary_retokenized=counts.boundary, retokenized_tokens=counts.boundary_tokens,
        accepted_draft_tokens=run.drafting.accepted if run.drafting else 0,
        draft_tokens=run.drafting.drafted if run.drafting and run.drafting.gen_setting else None,
        tag_drafts_accepted=run.drafting.tag_accepted if run.drafting else 0,
        output_tokens=output_tokens, program_tokens=counts.program, prompt_reused_tokens=run.prompt_reused or None,
        copies=sum(isinstance(op, CopyLines) for op in final_ops), prompt_tokens=prompt_tokens,
        copied_rest=f"{run.copied_rest[0]}-{run.copied_rest[1]}" if run.copied_rest else None,
        noop_refused=counts.noop_refused, shape_refused=counts.shape_refused, backward_refused=counts.backward_refused,
        past_end_refused=counts.past_end_refused,
        **DecodeMetrics.step_timing(run.cache.step_seconds[run.base_steps:]),
    )
    return DecodeResult(
        strategy="cad", mode="reference" if run.forced is not None else "model", output=output,
        program=run.program.decode("utf-8", "replace"), partial=stop_reason in ("max_tokens", "cancel", "loop"),
        stop_reason=stop_reason or "error", error=error, metrics=metrics, choices=tuple(run.choices or ()),
    )
