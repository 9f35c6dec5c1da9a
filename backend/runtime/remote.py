"""Copy-as-decode on a remote engine (vLLM, SGLang, llama.cpp server): one program item per request.

The engine is not changed and gives no logits, so the grammar goes to the engine instead:

    request   prompt = chat prompt + the program so far (each copy's text after its tag),
              grammar = one item or nothing (`remote_grammar.item_regex` / `item_gbnf`),
              stop = ['"/>', '</gen>']: the request ends the moment an item closes
    copy      `<copy lines="i-j` came back: we check 1 <= i <= j <= n (a grammar bounds each number
              to 1..n, or to F..n with F past the lines already copied when copies move forward,
              copy_order.py; for i > j we ask again for the second number, bounded to i..n), then append
              `"/>` + the copied lines to the prompt of the next request. With prefix caching
              (vLLM V1, SGLang's radix cache, llama.cpp's cache_prompt) the engine prefills only
              the new suffix: a copy costs one batched prefill, inside the next request.
    gen       `<gen>text` came back: `</gen>` + "\\n" close it (the decoding layout, prompt.py)
    end       an empty completion stopped by EOS: the program is complete
    shape     an instruction that fixes its program's shape (a rename, "Delete lines 4-6", "Change 1
              to 2 on line 12"): its copies are written here without a request, its gens asked under
              a grammar of the lines it allows there, and it ends when every line is read
              (remote_shape.py)

Events are the in-process ones (tag / copy / gen, then done) so the app and the benchmarks consume
them unchanged. Token counts are our tokenizer's count of the text (`counter`); the server's own
completion-token count is kept in `metrics["server_completion_tokens"]` when it reports usage.
`forwards` counts requests + program tokens (each request is one prefill, each token one step).
Plain decoding ("ar") is one request without a grammar. Prompt lookup runs inside an engine
(vLLM `--speculative-config '{"method": "ngram", ...}'`), not in a client: "pld" is refused, as is
reference mode (forcing a given text needs the logits).

Caveat: the prompt travels as text, so the server tokenises it. A special-token string inside the
input (`<|im_end|>`) may be read as that special token by the server; the in-process runtimes keep
it as text.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from backend.core.copy_order import copy_floor, items_past_end
from backend.core.line_shape import LineShape
from backend.core.lines import line_count
from backend.core.program import CopyLines, Gen, Op
from backend.core.resolve import resolve_program
from backend.runtime.early_end import copy_tag, rest_to_copy
from backend.runtime.decoder import ProgramStream
from backend.runtime.events import DecodeEvent, DecodeMetrics, DecodeResult
from backend.runtime.prompt import _render, plain_messages, program_messages
from backend.runtime.remote_client import Completion, CompletionsClient, ItemGrammar, RemoteError
from backend.runtime.remote_shape import ShapeStep, next_step
from backend.runtime.remote_grammar import (
    COPY_PREFIX,
    COPY_STOP,
    GEN_PREFIX,
    GEN_STOP,
    STOP_STRINGS,
    item_gbnf,
    item_regex,
    second_number_gbnf,
    second_number_regex,
)

_COPY_TEXT = re.compile(r'<copy lines="([1-9][0-9]*)-([1-9][0-9]*)$')


@dataclass
class _Run:
    """Shared state of one remote decode: timing, counts, the per-request log."""

    counter: Callable[[str], int]
    started: float = 0.0
    t0: float | None = None        # when the first chunk arrived (the prompt prefill is done)
    requests: int = 0
    tokens: int = 0                # program tokens by our tokenizer (tag + gen)
    prompt_tokens: int = 0
    server_tokens: int | None = None
    ttfts: list | None = None

    def elapsed(self) -> float:
        return max(0.0, time.perf_counter() - (self.t0 if self.t0 is not None else self.started))

    def event(self, kind: str, text: str, tokens: int) -> DecodeEvent:
        return DecodeEvent(kind, text, tokens, self.requests + self.tokens, self.elapsed())

    def account(self, done: Completion) -> None:
        self.requests += 1
        if self.t0 is None:
            self.t0 = self.started + (done.first_chunk_seconds or done.seconds)
        (self.ttfts if self.ttfts is not None else []).append(done.first_chunk_seconds)
        if done.completion_tokens is not None:
            self.server_tokens = (self.server_tokens or 0) + done.completion_tokens


def _stream_item(client: CompletionsClient, body: dict[str, Any], run: _Run,
                 stream: ProgramStream, lead: str = "") -> Iterator[DecodeEvent | Completion]:
    """One request: gen text is streamed as it comes (copy tags wait for their check). `lead`:
    the item's first characters, already at the prompt's end (`held_lt`); the returned text is
    read, and handed back, with them in front."""
    held, is_gen = lead, False
    for item in client.stream(body):
        if isinstance(item, Completion):
            run.account(item)
            yield replace(item, text=lead + item.text) if lead else item
            return
        held += item
        is_gen = is_gen or held.startswith(GEN_PREFIX[:2])
        if is_gen:
            yield from _program_events(stream, held, run)
            held = ""


def _program_events(stream: ProgramStream, text: str, run: _Run) -> Iterator[DecodeEvent]:
    for kind, segment in stream.feed(text.encode("utf-8")):
        count = run.counter(segment)
        run.tokens += count
        yield run.event(kind, segment, count)


def _item_grammars(n_lines: int, first_line: int) -> tuple[ItemGrammar, ItemGrammar]:
    """The grammar of one item whose copy starts at `first_line` or later, and of one whose `<` is
    already in the prompt (held_lt)."""
    return (ItemGrammar(item_regex(n_lines, first_line=first_line), item_gbnf(n_lines, first_line=first_line)),
            ItemGrammar(item_regex(n_lines, after_lt=True, first_line=first_line),
                        item_gbnf(n_lines, after_lt=True, first_line=first_line)))


def _next_step(shape: LineShape | None, ops: list[Op], n_lines: int, forward_copies: bool) -> ShapeStep:
    """What the program asks for next: the shape's step (remote_shape.py); the end, once a gen has
    followed the input's last line; or any item, its copy starting at the floor (copy_order.py)."""
    if shape is not None:
        return next_step(shape, ops)
    if forward_copies and (items_past_end(ops, n_lines) or 0) > 0:
        return ShapeStep(end=True)
    return ShapeStep(grammars=_item_grammars(n_lines, copy_floor(ops, n_lines) if forward_copies else 1))


def remote_program(
    client: CompletionsClient, source: str, instruction: str | None, *, counter: Callable[[str], int],
    template: Any = None, style: str = "few-shot", max_new_tokens: int, temperature: float = 0.0,
    top_p: float = 1.0, seed: int | None = None, cancel: threading.Event | None = None, copy_rest: bool = False,
    shape: LineShape | None = None, forward_copies: bool = False,
) -> Iterator[DecodeEvent]:
    """Copy-as-decode through a remote engine (see the module docstring); events, then done. `style`:
    the prompt style the served model was trained for (its models.yaml `prompt`); `copy_rest`: an early
    end after a copy copies the rest of the input, as in process (early_end.py); `shape`: the shape the
    instruction fixes (remote_shape.py: its copies are written here, its gens asked under its grammar);
    `forward_copies`: each request's copy starts after the lines already copied (copy_order.py)."""
    n_lines = line_count(source)
    lead = ""  # "<" while the prompt ends with the next item's opening (held_lt)
    context = _render(template, program_messages(source, instruction, style=style))
    run, stream = _Run(counter, started=time.perf_counter(), ttfts=[], prompt_tokens=counter(context)), ProgramStream()
    ops: list[Op] = []
    counts = {"copied": 0, "tag": 0, "gen": 0, "retries": 0, "copies": 0}
    stop_reason, error = None, None
    sampling = {"temperature": temperature, "top_p": top_p, "seed": seed}
    try:
        while stop_reason is None:
            if cancel is not None and cancel.is_set():
                stop_reason = "cancel"
                break
            room = max_new_tokens - run.tokens
            if room <= 0:
                stop_reason = "max_tokens"
                break
            step = _next_step(shape, ops, n_lines, forward_copies)
            if step.end or step.copy is not None:
                stop_reason = "eos" if step.end else None
                if step.copy is not None:
                    context, lead = yield from _append_copy(step.copy, copy_tag(step.copy.start, step.copy.end),
                                                            source, stream, run, counts, ops, context)
                continue
            plain, after_lt = step.grammars  # type: ignore[misc]  # _next_step: an end, a copy, or grammars
            body = client.body(context, max_tokens=room, stop=STOP_STRINGS, grammar=after_lt if lead else plain,
                               **sampling)
            done = yield from _answer(client, body, run, stream, lead)
            text = done.text
            context, lead = context.removesuffix(lead), ""  # the returned text holds the lead again
            if done.finish_reason == "length":
                stop_reason = "max_tokens"
                if text.startswith(GEN_PREFIX) and len(text) > len(GEN_PREFIX):
                    ops.append(Gen(text[len(GEN_PREFIX):]))  # as in-process: an unclosed gen's text is kept
            elif not text:
                stop_reason = "eos"
                if copy_rest:
                    yield from _copy_the_rest(ops, source, stream, run, counts)
            elif text.startswith(GEN_PREFIX):
                yield from _program_events(stream, GEN_STOP, run)
                ops.append(Gen(text[len(GEN_PREFIX):]))
                context += text + GEN_STOP + "\n"
            else:
                op, tag, retried = _checked_copy(client, context, text, n_lines, run, sampling)
                counts["retries"] += retried
                context, lead = yield from _append_copy(op, tag, source, stream, run, counts, ops, context)
    except (RemoteError, ValueError) as exc:
        stop_reason, error = "error", str(exc)
    yield _done(ops, source, stop_reason, error, run, counts)


def _answer(client: CompletionsClient, body: dict[str, Any], run: _Run, stream: ProgramStream,
            lead: str) -> Generator[DecodeEvent, None, Completion]:
    """One request's events as they stream; returns its completion."""
    done = None
    for item in _stream_item(client, body, run, stream, lead):
        if isinstance(item, Completion):
            done = item
        else:
            yield item
    assert done is not None
    return done


def _append_copy(op: CopyLines, tag: str, source: str, stream: ProgramStream, run: _Run, counts: dict[str, int],
                 ops: list[Op], context: str) -> Generator[DecodeEvent, None, tuple[str, str]]:
    """A checked copy joins the program and the prompt; returns (the prompt, the lead it now ends
    with: the next item's `<` after a copy ending in whitespace, see `held_lt`)."""
    copied = yield from _copy_events(op, tag, source, stream, run, counts)
    ops.append(op)
    context += tag + copied
    return (context + "<", "<") if held_lt(copied, op, line_count(source)) else (context, "")


def _copy_events(op: CopyLines, tag: str, source: str, stream: ProgramStream, run: _Run,
                 counts: dict[str, int]) -> Generator[DecodeEvent, None, str]:
    """The events of a checked copy (its tag, then its text); returns the copied text."""
    yield from _program_events(stream, tag, run)
    copied = resolve_program([op], source)
    n = run.counter(copied)
    counts["copied"] += n
    counts["copies"] += 1
    yield run.event("copy", copied, n)
    return copied


def held_lt(copied: str, op: CopyLines, n_lines: int) -> bool:
    """Whether the next request's prompt should end with the next item's `<` already.

    A server tokenises the prompt text itself. A byte-level BPE pre-tokenizer leaves a run of
    whitespace whole at the end of a string but splits its last character off when a non-space
    follows, and the trained context is tokenised whole (backend/training/examples.py): a copy
    ending on a blank line is `\\n` `\\n` before the next item's `<`, while a prompt ending there is
    one `\\n\\n` token, a context the trained model never saw (it ended the program there; the
    in-process decoder tokenises such a copy as followed, program_text.tokenize_before_item). So after a
    copy that stops before the input's last line and ends in two or more whitespace characters,
    the `<` goes into the prompt; the model can then not end the program at that point (it must
    write an item), the one difference from decoding in process."""
    return op.end < n_lines and len(copied) >= 2 and copied[-2:].isspace()


def _copy_the_rest(ops: list[Op], source: str, stream: ProgramStream, run: _Run,
                   counts: dict[str, int]) -> Iterator[DecodeEvent]:
    """After the server's end: a program that ended right after a copy short of the input's end
    gets a copy of the rest, as in process (backend/runtime/early_end.py); else nothing."""
    rest = rest_to_copy(ops, line_count(source))
    if rest is None:
        return
    op = CopyLines(*rest)
    yield from _program_events(stream, copy_tag(*rest), run)
    copied = resolve_program([op], source)
    n = run.counter(copied)
    counts["copied"] += n
    counts["copies"] += 1
    counts["rest_first"], counts["rest_last"] = rest
    ops.append(op)
    yield run.event("copy", copied, n)


def _checked_copy(client: CompletionsClient, context: str, text: str, n_lines: int, run: _Run,
                  sampling: dict[str, Any]) -> tuple[CopyLines, str, int]:
    """(CopyLines, its full tag text, retries) for a returned `<copy lines="i-j`.
    i > j: the second number is asked again, bounded to i..n. Raises ValueError for text that is
    not a copy tag (a server that ignored the grammar)."""
    match = _COPY_TEXT.match(text)
    if match is None:
        raise ValueError(f"the server returned {text[:60]!r}, not a program item: does it enforce the grammar?")
    first, second = int(match.group(1)), int(match.group(2))
    if max(first, second) > n_lines:
        raise ValueError(f"the server returned copy lines {first}-{second} but the input has {n_lines} lines")
    retried = 0
    if first > second:
        retried = 1
        prefix = f"{COPY_PREFIX}{first}-"
        grammar = ItemGrammar(second_number_regex(first, n_lines), second_number_gbnf(first, n_lines))
        body = client.body(context + prefix, max_tokens=len(str(n_lines)) + 3, stop=(COPY_STOP,), grammar=grammar, **sampling)
        done = client.complete(body)
        run.account(done)
        digits = done.text.removesuffix(COPY_STOP)
        if not digits.isdigit() or not first <= int(digits) <= n_lines:
            raise ValueError(f"copy lines {first}-{second}: start after end, and the retry returned {done.text!r}")
        second = int(digits)
    return CopyLines(first, second), f"{COPY_PREFIX}{first}-{second}{COPY_STOP}", retried


def _done(ops: list[Op], source: str, stop_reason: str | None, error: str | None, run: _Run,
          counts: dict[str, int]) -> DecodeEvent:
    try:
        output = resolve_program(ops, source)
    except ValueError as exc:
        output, stop_reason, error = "", "error", str(exc)
    if stop_reason not in ("eos", "error") and error is None and stop_reason != "complete":
        error = "incomplete program: stopped before the model ended it"
    output_tokens = run.counter(output) if output else 0
    generated = sum(run.counter(op.text) for op in ops if isinstance(op, Gen))
    metrics = _metrics(
        run, tokens_copied=counts["copied"], tokens_generated=generated, tokens_tag=max(0, run.tokens - generated),
        output_tokens=output_tokens, program_tokens=run.tokens, copies=counts["copies"], range_retries=counts["retries"],
        copied_rest=f"{counts['rest_first']}-{counts['rest_last']}" if counts.get("rest_first") else None,
    )
    result = DecodeResult(
        strategy="cad", mode="model", output=output, program=_program_text(ops), partial=stop_reason in ("max_tokens", "cancel"),
        stop_reason=stop_reason or "error", error=error, metrics=metrics,
    )
    return DecodeEvent("done", "", 0, run.requests + run.tokens, metrics.wall_seconds, result)


def merged_events(ops: list[Op], source: str, counter: Callable[[str], int], *, strategy: str) -> Iterator[DecodeEvent]:
    """An edit merged without the model (the snippet aligner's, as `ops`), streamed as the copy and
    gen events of its program and a done event; no request goes to the server (it cannot be made to
    replay a text, and nothing is left for it to decide). Forwards and requests are 0."""
    run = _Run(counter=counter, started=time.perf_counter())
    run.t0 = run.started
    counts = {"copied": 0, "copies": 0, "retries": 0}
    for op in ops:
        if isinstance(op, CopyLines):
            text = resolve_program([op], source)
            counts["copied"] += counter(text)
            counts["copies"] += 1
            yield run.event("copy", text, counter(text))
        elif isinstance(op, Gen):
            yield run.event("gen", op.text, counter(op.text))
    done = _done(ops, source, "eos", None, run, counts)
    assert done.result is not None
    if strategy != "cad":
        done = replace(done, result=replace(done.result, strategy=strategy, program=None))
    yield done


def _metrics(run: _Run, **counts: Any) -> DecodeMetrics:
    """DecodeMetrics of a remote run: `forwards` = requests + program tokens (one prefill per
    request, one step per token); remote-only fields go in where DecodeMetrics has them."""
    wall = run.elapsed()
    ttfts = sorted(t for t in (run.ttfts or []) if t is not None)
    values: dict[str, Any] = dict(
        forwards=run.requests + run.tokens, wall_seconds=wall,
        prefill_seconds=(run.t0 - run.started) if run.t0 is not None else 0.0,
        tokens_per_second=counts["output_tokens"] / wall if wall > 0 else 0.0, jump_forward_tokens=0,
        boundary_retokenized=0, accepted_draft_tokens=0, prompt_tokens=run.prompt_tokens, requests=run.requests,
        server_completion_tokens=run.server_tokens, first_chunk_seconds=ttfts[len(ttfts) // 2] if ttfts else None,
        **counts,
    )
    known = {f.name for f in fields(DecodeMetrics)}
    return DecodeMetrics(**{k: v for k, v in values.items() if k in known})


def _program_text(ops: list[Op]) -> str:
    from backend.runtime.prompt import context_program

    return context_program(ops)


def remote_plain(
    client: CompletionsClient, source: str, instruction: str | None, *, counter: Callable[[str], int],
    template: Any = None, max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
    seed: int | None = None, cancel: threading.Event | None = None,
) -> Iterator[DecodeEvent]:
    """Plain decoding through the engine: one streamed request, the whole edited text."""
    prompt = _render(template, plain_messages(source, instruction))
    run = _Run(counter, started=time.perf_counter(), ttfts=[], prompt_tokens=counter(prompt))
    body = client.body(prompt, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
    text, stop_reason, error = "", None, None
    try:
        for item in client.stream(body):
            if isinstance(item, Completion):
                run.account(item)
                stop_reason = "max_tokens" if item.finish_reason == "length" else "eos"
                break
            if cancel is not None and cancel.is_set():
                stop_reason = "cancel"
                break
            text += item
            count = counter(item)
            run.tokens += count
            yield run.event("gen", item, count)
    except RemoteError as exc:
        stop_reason, error = "error", str(exc)
    metrics = _metrics(run, tokens_copied=0, tokens_generated=run.tokens, tokens_tag=0,
                       output_tokens=counter(text) if text else 0, draft_tokens=0)
    wall = metrics.wall_seconds
    result = DecodeResult(
        strategy="ar", mode="model", output=text, program=None, partial=stop_reason in ("max_tokens", "cancel"),
        stop_reason=stop_reason or "error", error=error, metrics=metrics,
    )
    yield DecodeEvent("done", "", 0, run.requests + run.tokens, wall, result)
