"""The constrained decoder: the model writes a copy-as-decode program under the token FSM.

`decode_program` is a generator of `DecodeEvent`s (tag / copy / gen, then one done event whose
result is the `DecodeResult`), like nanochat's engine: every token says whether it was chosen by
the model or forced (jump-forward, reference replay), and a non-streaming wrapper drains it.

One loop, a ladder of small steps (gpt-fast style):

    mask      FSM allowed set -> the allowed logits gathered (tag states) or the banned ones set
              to -inf in place (gen states); index tensors cached per AllowedTokens.key
    choose    sample_token (greedy / seeded temperature + top-p), or the forced program's next token
    advance   TokenFSM.advance; the token joins `pending` (tokens waiting for the next forward)
    jump      where the grammar forces text (`forced_text`: after `<copy` the rest ` lines="`,
              after `"` the `/>`), its tokens join `pending` too: no decode step is spent on them
    copy      a completed copy tag: the copied lines join `pending`, tokenised as one block
    forward   before the next choice, `pending` enters the cache in ONE forward (append_span)

So a sampled token, the forced text after it and a copy it completes cost one forward together.
Forced tokens would be decoded one step each without jump-forward: `jump_forward_tokens` counts
them, and each is a forward saved.

Context layout (DESIGN.md): prompt, then the program as emitted, with each copy's text right after
its tag's closing `"/>` (see `backend.runtime.prompt`). Tokens that would put program text between
a copy tag and its copied text (`"/>\\n`, `"/><` in some vocabularies) are masked out where a copy
tag can close. The join between the tag and the copied text is boundary-safe: the tag's last two
tokens and the copied text are tokenised together; if that changes the tag's tokens they are
rolled back and re-prefilled in the same forward (`boundary_retokenized` counts such joins). A
join between two copies never happens: a tag always separates them.

Reference mode (`force_program`): the program text is forced token by token (its canonical
tokenisation, item by item), except jump-forward segments and copies, which go through one forward
each exactly as in model mode: the mechanism's cost with perfect spans.

Counting, as the baselines count: `forwards` and `elapsed` start after the prompt prefill (its time
is `prefill_seconds`); a reference replay ends with the forward after the last program token (the
one that would predict EOS). `max_new_tokens` bounds the program tokens (sampled + forced), not
the copied ones. `output_tokens` is the canonical token count of the resolved output, the same
number plain decoding of that output would produce, so `tokens_per_second` compares strategies.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from backend.core.fsm import FSMState, TokenFSM, TokenVocabulary
from backend.core.lines import line_count
from backend.core.program import GEN_CLOSE, GEN_OPEN, CopyLines, Gen, Op, parse_program
from backend.core.resolve import resolve_program
from backend.runtime.events import DecodeEvent, DecodeMetrics, DecodeResult
from backend.runtime.kv import SequenceCache
from backend.runtime.prompt import program_prompt_ids
from backend.runtime.sampling import make_generator, sample_token
from backend.runtime.vocab import vocabulary_from_hf

# Tag tokens re-tokenised together with a copied text at their join. Two cover `"/>` whether it
# came as one token or as `"` + `/>` (jump-forward); digits before it never merge with it (both
# SmolLM2 and Qwen split digits one per token).
JOIN_WINDOW_TOKENS = 2


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` as plain text: `<|im_end|>` inside a source file stays ordinary text."""
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


# --------------------------------------------------------------------------------------------
# Grammar: the FSM and its mask tensors, built once per (tokenizer, logits size, device)
# --------------------------------------------------------------------------------------------


@dataclass
class Grammar:
    """The token FSM over one tokenizer, with mask tensors cached per allowed set.

    Masks are bool [V] (True = banned), V = the model's logits size (Qwen pads its embedding past
    the tokenizer; ids past the tokenizer are always banned). Building the vocabulary takes ~0.3 s
    for SmolLM2's 49k tokens.

    `choose` applies a mask without touching all V logits where it can: a tag state allows a few
    dozen tokens, so their logits are gathered and sampled among; a gen state bans only special
    tokens and a few hundred holding '>', so those are filled with -inf in place. A full-width
    masked_fill costs ~20 µs at 49k on an idle 2-core CPU but several ms when the cores are
    oversubscribed (OpenMP threads waiting for each other); the gather / index_fill stay ~10 µs.
    Same distribution either way: sampling among the allowed logits is sampling the masked vector.
    """

    vocabulary: TokenVocabulary
    fsm: TokenFSM
    logits_size: int
    device: Any
    _by_key: dict[tuple, tuple[bool, torch.Tensor]] = field(default_factory=dict)
    _close_ids: dict[tuple, tuple[int, ...]] = field(default_factory=dict)

    @property
    def eos_id(self) -> int:
        return self.vocabulary.eos_id

    def token_bytes(self, token_id: int) -> bytes:
        raw = self.vocabulary.token_bytes[token_id] if self.vocabulary.token_bytes is not None else None
        if raw is None:
            raw = (self.vocabulary.texts[token_id] or "").encode("utf-8")
        return raw

    def allowed_ids(self, state: FSMState) -> tuple[int, ...]:
        """The ids the decoder may choose from `state` (the FSM's set, minus tokens that would put
        program text between a copy tag and its copied text). Changes no state beyond caches."""
        allowed = self.fsm.allowed(state)
        if not _copy_can_close(state):
            return allowed.ids
        key = (state.core, state.n_lines)
        found = self._close_ids.get(key)
        if found is None:
            found = tuple(i for i in allowed.ids if self._closes_cleanly(state, i))
            self._close_ids[key] = found
        return found

    def _index(self, state: FSMState) -> tuple[bool, torch.Tensor]:
        """(True, allowed ids) for a small allowed set, else (False, banned ids). Cached per
        AllowedTokens.key (an int: hashing a 49k-id tuple each step would cost ~0.5 ms), or per
        state where a copy tag can close (small sets, filtered per state)."""
        if _copy_can_close(state):
            key: tuple = ("close", state.core, state.n_lines)
        else:
            key = ("set", self.fsm.allowed(state).key)
        found = self._by_key.get(key)
        if found is None:
            usable = [i for i in self.allowed_ids(state) if i < self.logits_size]
            if len(usable) * 2 <= self.logits_size:
                found = (True, torch.tensor(usable, dtype=torch.long, device=self.device))
            else:
                banned = torch.ones(self.logits_size, dtype=torch.bool)
                banned[torch.tensor(usable, dtype=torch.long)] = False
                found = (False, banned.nonzero().flatten().to(self.device))
            self._by_key[key] = found
        return found

    def mask(self, state: FSMState) -> torch.Tensor:
        """bool [V], True where the token is banned from `state`."""
        small, ids = self._index(state)
        banned = torch.zeros(self.logits_size, dtype=torch.bool, device=self.device)
        if small:
            banned.fill_(True)
            banned[ids] = False
        else:
            banned[ids] = True
        return banned

    def choose(
        self, logits: torch.Tensor, state: FSMState, temperature: float, top_p: float, generator: Any
    ) -> int | None:
        """The next token from logits [V] (changed in place) under `state`'s mask; None if the
        state allows nothing."""
        small, ids = self._index(state)
        with torch.inference_mode():  # logits come out of inference mode: edit them inside it
            if small:
                if ids.numel() == 0:
                    return None
                return int(ids[sample_token(logits.index_select(0, ids), temperature, top_p, generator)])
            logits.index_fill_(0, ids, float("-inf"))
            return sample_token(logits, temperature, top_p, generator)

    def accepts(self, state: FSMState, token_id: int) -> bool:
        """Whether the decoder may choose `token_id` from `state` (see `allowed_ids`)."""
        try:
            self.fsm.advance(state, token_id)
        except ValueError:
            return False
        return not _copy_can_close(state) or self._closes_cleanly(state, token_id)

    def _closes_cleanly(self, state: FSMState, token_id: int) -> bool:
        if token_id == self.eos_id:
            return True
        step = self.fsm.advance(state, token_id)
        closes = any(isinstance(op, CopyLines) for op in step.completed)
        return not closes or step.state.core == ("B", True)


def _copy_can_close(state: FSMState) -> bool:
    """Whether a token read from `state` may complete a copy tag (line numbers or `"/>` pending)."""
    mode = state.core[0]
    return mode in ("I", "J") or (mode == "T" and state.core[1][:1] == '"')


_GRAMMARS: dict[tuple, tuple[Any, Grammar]] = {}
_GRAMMARS_LOCK = threading.Lock()


def grammar_for(loaded: Any) -> Grammar:
    """The Grammar for a loaded model's tokenizer and logits size (built once, then cached)."""
    tokenizer = loaded.tokenizer
    if tokenizer is None:
        raise ValueError(f"model {getattr(loaded, 'name', '?')} has no tokenizer: it cannot decode text")
    size = int(loaded.vocab_size)
    key = (id(tokenizer), size, str(loaded.device))
    with _GRAMMARS_LOCK:
        hit = _GRAMMARS.get(key)
        if hit is not None and hit[0] is tokenizer:
            return hit[1]
        vocabulary = vocabulary_from_hf(tokenizer)
        grammar = Grammar(vocabulary, TokenFSM(vocabulary), size, loaded.device)
        _GRAMMARS[key] = (tokenizer, grammar)  # keeps the tokenizer alive, so id() stays unique
        return grammar


# --------------------------------------------------------------------------------------------
# Program text -> tag / gen segments, as it grows token by token
# --------------------------------------------------------------------------------------------


class ProgramStream:
    """Splits the program's bytes, fed token by token, into ("tag" | "gen", text) segments.

    Exact text: bytes of a character split across tokens are held back until it is whole. Inside a
    gen, a trailing prefix of `</gen>` is held back until it is known to close the gen (then it is
    tag text) or not (then it is gen text), so gen events never show half a closing tag. What is
    held back is `withheld`. Assumes a program the FSM accepted.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.in_gen = False
        self._pending = ""   # inside a gen: a prefix of "</gen>" not yet resolved
        self._outside = ""   # outside gens: the last few tag chars, to see "<gen>" complete

    @property
    def withheld(self) -> str:
        return self._pending

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []

        def put(kind: str, text: str) -> None:
            if not text:
                return
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + text)
            else:
                out.append((kind, text))

        for ch in self._decoder.decode(data):
            if not self.in_gen:
                put("tag", ch)
                self._outside = (self._outside + ch)[-len(GEN_OPEN):]
                if self._outside == GEN_OPEN:
                    self.in_gen, self._outside = True, ""
                continue
            candidate = self._pending + ch
            if GEN_CLOSE.startswith(candidate):
                self._pending = candidate
                if candidate == GEN_CLOSE:
                    put("tag", candidate)
                    self._pending, self.in_gen = "", False
                continue
            put("gen", self._pending)
            self._pending = ""
            if ch == "<":
                self._pending = ch
            else:
                put("gen", ch)
        return out


# --------------------------------------------------------------------------------------------
# Reference replay: the forced program's tokens
# --------------------------------------------------------------------------------------------


def _segment_ends(program: str) -> list[int]:
    """Char offsets where the forced program is cut before tokenising: after each copy tag's
    `"/>` and after each item's optional newline (so no token crosses a copy's join)."""
    ends: list[int] = []
    position = 0
    while position < len(program):
        if program.startswith(GEN_OPEN, position):
            position = program.index(GEN_CLOSE, position + len(GEN_OPEN)) + len(GEN_CLOSE)
        else:
            position = program.index('"/>', position) + 3
        ends.append(position)
        if program.startswith("\n", position):
            position += 1
            ends.append(position)
    return ends


class ForcedProgram:
    """The next token of a forced program: the canonical tokenisation of each segment (see
    `_segment_ends`) from the current position, re-tokenised after a jump-forward."""

    def __init__(self, program: str, tokenizer: Any, grammar: Grammar) -> None:
        self.data = program.encode("utf-8")
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.position = 0  # bytes consumed
        self._ends = [len(program[:end].encode("utf-8")) for end in _segment_ends(program)]
        self._queue: list[int] = []

    @property
    def done(self) -> bool:
        return self.position >= len(self.data)

    def next_token(self, state: FSMState) -> int:
        """The next token id (the FSM must accept it; falls back to the longest allowed token
        that is a prefix of the rest if the canonical one is not allowed)."""
        if not self._queue:
            end = next(e for e in self._ends if e > self.position)
            self._queue = encode_text(self.tokenizer, self.data[self.position:end].decode("utf-8"))
        token = self._queue[0]
        if self.grammar.accepts(state, token):
            self._queue.pop(0)
        else:
            token = self._fallback(state)
            self._queue = []
        self.position += len(self.grammar.token_bytes(token))
        return token

    def _fallback(self, state: FSMState) -> int:
        rest = self.data[self.position:]
        best, best_len = None, 0
        for token in self.grammar.allowed_ids(state):
            raw = self.grammar.token_bytes(token)
            if token != self.grammar.eos_id and len(raw) > best_len and rest.startswith(raw):
                best, best_len = token, len(raw)
        if best is None:
            raise ValueError(f"forced program: no allowed token continues {rest[:20]!r}")
        return best

    def skip(self, text: str) -> None:
        """Consume jump-forward text (must be what the program holds there)."""
        raw = text.encode("utf-8")
        if not self.data.startswith(raw, self.position):
            raise ValueError(f"forced program does not continue with the forced text {text!r}")
        self.position += len(raw)
        self._queue = []


# --------------------------------------------------------------------------------------------
# The decoder
# --------------------------------------------------------------------------------------------


def _check_forced(program: str, source: str) -> None:
    """Rejects a forced program that is malformed or does not fit the source (ValueError)."""
    ops = parse_program(program)
    if any(not isinstance(op, (CopyLines, Gen)) for op in ops):
        raise ValueError("forced program: only line copies and gens can be decoded")
    if any(isinstance(op, Gen) and not op.text for op in ops):
        raise ValueError("forced program: an empty gen cannot be decoded")
    resolve_program(ops, source)


def _partial_gen_text(state: FSMState) -> str:
    """The certain text of an unclosed gen: its bytes minus a trailing prefix of `</gen` and any
    unfinished character."""
    if state.core[0] != "G":
        return ""
    body = state.body[: len(state.body) - state.core[1]] if state.core[1] else state.body
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(body, final=False)


_WHERE = {"tag": "inside a tag", "first": "inside a copy tag", "last": "inside a copy tag", "gen": "inside a gen"}


def decode_program(
    loaded: Any,
    source: str,
    instruction: str | None,
    *,
    max_new_tokens: int | None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    cancel: threading.Event | None = None,
    force_program: str | None = None,
) -> Iterator[DecodeEvent]:
    """Copy-as-decode: the model writes a program under the FSM; copies enter the cache in one
    forward each. Yields tag / copy / gen events, then one done event with the DecodeResult.

    `force_program` (mode "reference"): that program text is forced instead of sampled.
    Stops at EOS ("eos"), the end of a forced program ("complete"), `max_new_tokens` program tokens
    or a full context ("max_tokens", partial) or `cancel` ("cancel", partial); a partial program
    resolves its completed ops plus an unclosed gen's text so far. Model misbehaviour never raises
    mid-stream: it ends the stream with stop_reason "error" and the message in `error`.
    Rejects (ValueError, raised by the call itself, before any decoding): max_new_tokens <= 0, a
    bad temperature or top_p, a forced program that is malformed, holds CopyTokens or empty gens,
    or does not fit the source.
    """
    if max_new_tokens is not None and max_new_tokens <= 0:
        raise ValueError("max_new_tokens must be positive")
    if temperature < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"bad sampling settings: temperature={temperature}, top_p={top_p}")
    if force_program is not None:
        _check_forced(force_program, source)
    return _decode(loaded, source, instruction, max_new_tokens, temperature, top_p, seed, cancel, force_program)


def _decode(
    loaded: Any,
    source: str,
    instruction: str | None,
    max_new_tokens: int | None,
    temperature: float,
    top_p: float,
    seed: int | None,
    cancel: threading.Event | None,
    force_program: str | None,
) -> Iterator[DecodeEvent]:
    tokenizer = loaded.tokenizer
    grammar = grammar_for(loaded)
    fsm = grammar.fsm
    context_length = getattr(getattr(loaded, "spec", None), "context_length", None)
    forced = ForcedProgram(force_program, tokenizer, grammar) if force_program is not None else None
    generator = make_generator(seed) if temperature > 0 and forced is None else None
    prompt = program_prompt_ids(tokenizer, source, instruction)
    cache = SequenceCache(loaded.model)
    stream = ProgramStream()
    state = fsm.start(line_count(source))

    ops: list[Op] = []
    program = bytearray()
    pending: list[int] = []   # tokens decided, waiting for the next forward
    counts = {"tag": 0, "gen": 0, "copied": 0, "jump": 0, "boundary": 0, "boundary_tokens": 0}
    stop_reason: str | None = None
    error: str | None = None

    started = time.perf_counter()
    logits = cache.append_span(prompt)  # [V]
    prefill_seconds = time.perf_counter() - started
    t0 = time.perf_counter()
    base = cache.forwards

    def event(kind: str, text: str, tokens: int) -> DecodeEvent:
        return DecodeEvent(kind, text, tokens, cache.forwards - base, time.perf_counter() - t0)

    def program_events(data: bytes, kind: str, tokens: int) -> list[DecodeEvent]:
        """Events for program bytes; the token count goes to the first segment of `kind`."""
        out = []
        for seg_kind, text in stream.feed(data):
            share = tokens if seg_kind == kind else 0
            tokens -= share
            out.append(event(seg_kind, text, share))
        if tokens:
            out.append(event(kind, "", tokens))
        return out

    def join_copy(text: str) -> int:
        """Put copied text into `pending`, tokenised with the tag's last tokens; returns how many
        tokens enter the cache for it (re-tokenised tag tokens included)."""
        window = (cache.token_ids[-JOIN_WINDOW_TOKENS:] + pending)[-JOIN_WINDOW_TOKENS:]
        joined = encode_text(tokenizer, b"".join(grammar.token_bytes(t) for t in window).decode("utf-8", "replace") + text)
        keep = 0
        while keep < len(window) and keep < len(joined) and window[keep] == joined[keep]:
            keep += 1
        changed = len(window) - keep
        if changed:
            counts["boundary"] += 1
            counts["boundary_tokens"] += changed
            from_pending = min(changed, len(pending))
            del pending[len(pending) - from_pending:]
            cache.rollback(changed - from_pending)
        pending.extend(joined[keep:])
        return len(joined) - keep

    def take(token: int) -> list[DecodeEvent]:
        """Advance the FSM by one token, queue it, and return its events plus any copy it completes."""
        nonlocal state
        step = fsm.advance(state, token)
        state = step.state
        pending.append(token)
        program.extend(grammar.token_bytes(token))
        kind = "gen" if any(k == "gen" for k, _ in step.pieces) else "tag"
        counts[kind] += 1
        return program_events(grammar.token_bytes(token), kind, 1) + complete(step.completed)

    def complete(completed: Sequence[Op]) -> list[DecodeEvent]:
        out = []
        for op in completed:
            ops.append(op)
            if isinstance(op, CopyLines):
                text = resolve_program([op], source)
                n = join_copy(text)
                counts["copied"] += n
                out.append(event("copy", text, n))
        return out

    def jump_forward() -> list[DecodeEvent]:
        """Forced text after the last token: its tokens join `pending` (no decode step)."""
        nonlocal state
        text = fsm.forced_text(state)
        if not text:
            return []
        ids = encode_text(tokenizer, text)
        probe, completed = state, []
        try:
            for token in ids:
                step = fsm.advance(probe, token)
                probe = step.state
                completed.extend(step.completed)
        except ValueError:
            return []  # the tokenisation does not fit the grammar: decode those chars normally
        if forced is not None:
            forced.skip(text)
        state = probe
        pending.extend(ids)
        program.extend(text.encode("utf-8"))
        counts["tag"] += len(ids)
        counts["jump"] += len(ids)
        return program_events(text.encode("utf-8"), "tag", len(ids)) + complete(completed)

    try:
        while True:
            program_tokens = counts["tag"] + counts["gen"]
            if cancel is not None and cancel.is_set():
                stop_reason = "cancel"
                break
            if max_new_tokens is not None and program_tokens >= max_new_tokens:
                stop_reason = "max_tokens"
                break
            if pending:
                if context_length is not None and cache.length + len(pending) > context_length:
                    stop_reason, error = "max_tokens", f"the context is full ({context_length} tokens)"
                    break
                logits = cache.append_span(pending)  # ids: [1, len(pending)] -> logits [V]
                pending.clear()
            if forced is not None:
                if forced.done:
                    stop_reason = "complete"
                    break
                token = forced.next_token(state)
            else:
                chosen = grammar.choose(logits, state, temperature, top_p, generator)
                if chosen is None:
                    stop_reason, error = "error", f"no token allowed in state {state.mode!r}"
                    break
                token = chosen
                if token == grammar.eos_id:
                    stop_reason = "eos"
                    break
            yield from take(token)
            yield from jump_forward()
    except Exception as exc:  # never raise mid-stream: the error goes into the result
        stop_reason, error = "error", f"{type(exc).__name__}: {exc}"

    program_text = program.decode("utf-8", "replace")
    final_ops = list(ops)
    if stop_reason not in ("eos", "complete") and not fsm.is_complete(state):
        where = _WHERE.get(state.mode, "mid-program")
        if error is None:
            error = f"incomplete program: stopped {where}"
        tail = _partial_gen_text(state)
        if tail:
            final_ops.append(Gen(tail))
            error += " (its text so far is kept)"
    try:
        output = resolve_program(final_ops, source)
    except ValueError as exc:
        output, stop_reason = "", "error"
        error = f"{error}; {exc}" if error else str(exc)

    wall = time.perf_counter() - t0
    output_tokens = len(encode_text(tokenizer, output))
    metrics = DecodeMetrics(
        tokens_copied=counts["copied"],
        tokens_generated=counts["gen"],
        tokens_tag=counts["tag"],
        forwards=cache.forwards - base,
        wall_seconds=wall,
        prefill_seconds=prefill_seconds,
        tokens_per_second=output_tokens / wall if wall > 0 else 0.0,
        jump_forward_tokens=counts["jump"],
        boundary_retokenized=counts["boundary"],
        retokenized_tokens=counts["boundary_tokens"],
        accepted_draft_tokens=0,
        output_tokens=output_tokens,
        program_tokens=counts["tag"] + counts["gen"],
        copies=sum(isinstance(op, CopyLines) for op in final_ops),
        prompt_tokens=len(prompt),
    )
    result = DecodeResult(
        strategy="cad",
        mode="reference" if forced is not None else "model",
        output=output,
        program=program_text,
        partial=stop_reason in ("max_tokens", "cancel"),
        stop_reason=stop_reason or "error",
        error=error,
        metrics=metrics,
    )
    yield DecodeEvent("done", "", 0, cache.forwards - base, wall, result)
