"""`RemoteEditEngine`: the EditEngine interface (validate / run / run_to_result / step_seconds /
lock) over a remote inference server, so the app and the commands take either engine.

What differs from the in-process engine: strategies "cad" and "ar" only (prompt lookup is an
engine-side setting there), mode "model" only (forcing a reference needs the logits; an update
snippet the aligner merges is streamed from its program without a request), token counts
by our tokenizer of the model's vocabulary (models.yaml `vocabulary`), and the context check uses
that count of the rendered prompt (an input over the context is edited through a window of it, as
in process: backend/core/window.py).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from backend.core.addressed import requested_shape
from backend.core.lines import split_lines
from backend.core.oracle import oracle_program
from backend.runtime.engine import ContextFull, EditEngine, EditError, EditLimits, EditRequest, PreparedEdit, _labelled
from backend.runtime.events import DecodeEvent
from backend.runtime.models import ModelSpec, default_model_name, spec_for
from backend.runtime.prompt import _render, plain_messages, program_messages
from backend.runtime.remote import merged_events, remote_plain, remote_program
from backend.runtime.remote_client import Completion, CompletionsClient, RemoteError

REMOTE_STRATEGIES = ("cad", "ar")


@dataclass
class RemoteModel:
    """The ModelHandle fields the app and the commands read, for a model served elsewhere. It has
    no cache here (`new_cache` raises): the server keeps the KV cache."""

    spec: ModelSpec
    url: str
    kind: str
    tokenizer: Any = None           # a TextTokenizer of the model's vocabulary (counts only)
    weights_label: str = "real"
    dtype: Any = "served"
    eos_ids: tuple[int, ...] = ()
    load_seconds: float = 0.0
    device: Any = ""
    vocab_size: int = 0             # unknown here: the server owns the logits
    runtime: str = "remote server"

    def __post_init__(self) -> None:
        self.device = self.device or f"{self.kind} at {self.url}"

    @property
    def name(self) -> str:
        return self.spec.name

    def new_cache(self) -> Any:
        raise RemoteError("a remote engine keeps the KV cache on the server: nothing to decode here")


def _counter_for(spec: ModelSpec) -> Any:
    from backend.tokenizers import load_tokenizer

    if not spec.vocabulary:
        raise EditError(f"model {spec.name} names no vocabulary in models.yaml: token counts need one")
    return load_tokenizer(spec.vocabulary)


class RemoteEditEngine(EditEngine):
    """Edits through a vLLM / SGLang / llama.cpp server. Same calls and errors as EditEngine."""

    def __init__(self, client: CompletionsClient, *, model: str | None = None, limits: EditLimits = EditLimits(),
                 copy_rest: bool = True, align_snippets: bool = True, guard_shapes: bool = True,
                 forward_copies: bool = True) -> None:
        spec = spec_for(model or default_model_name())
        self.guard_shapes = guard_shapes  # as EditEngine, by the request's grammar (remote_shape.py)
        self.copy_rest = copy_rest  # as EditEngine: an early end after a copy copies the rest (early_end.py)
        self.forward_copies = forward_copies  # as EditEngine, by each request's grammar (remote.py)
        self.align_snippets = align_snippets  # as EditEngine; a merge is streamed without the server
        self.window_inputs = True  # as EditEngine: an input over the server's context goes through a window
        self.client = client
        self.counter = _counter_for(spec)
        self.loaded = RemoteModel(spec=spec, url=client.root, kind=client.kind, tokenizer=self.counter)
        self.limits = limits
        self.lock = threading.Lock()
        self._step_seconds: float | None = None
        self._text_tokenizer: Any = self.counter

    @property
    def name(self) -> str:
        return self.loaded.spec.name

    def encode(self, text: str) -> list[int]:
        return self.counter.encode(text) if text else []

    def _prompt_tokens(self, request: EditRequest) -> int:
        if request.strategy == "cad":
            messages = program_messages(request.source, request.instruction, style=self.loaded.spec.prompt)
        else:
            messages = plain_messages(request.source, request.instruction)
        return int(self.counter.count(_render(None, messages)))

    def _prepare_whole(self, request: EditRequest) -> PreparedEdit:
        """EditEngine's for a server: also rejects "pld" and reference mode (module docstring); the
        context check counts the rendered prompt with this model's vocabulary (an input over the
        context goes through a window, as in process: EditEngine.prepare)."""
        if request.strategy not in REMOTE_STRATEGIES:
            raise EditError(
                f"strategy {request.strategy!r} does not run through a remote engine: prompt lookup is a server "
                "setting (vLLM --speculative-config with method ngram); use cad or ar"
            )
        if request.mode != "model":
            raise EditError("reference mode needs an in-process runtime (torch or llama.cpp): a server cannot force a text")
        prompt = self._prompt_tokens(request)
        output = request.max_new_tokens + (self.counter.count(request.source) if request.strategy == "cad" else 0)
        if prompt + output > self.context_length:
            raise ContextFull(
                f"too long for {self.name}: the prompt is {prompt:,} tokens and the output may need {output:,}, "
                f"but the context holds {self.context_length:,}; shorten the input or lower max new tokens"
            )
        aligned, declined = self._align(request)
        return PreparedEdit(request, (), None, aligned, declined)

    def _events(self, prepared: PreparedEdit, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        request = prepared.request
        if prepared.aligned_target is not None:  # merged by the snippet aligner: nothing for the server to do
            ops = oracle_program(request.source, prepared.aligned_target, objective="cost", tokenize=self.counter)
            events = merged_events(ops, request.source, self.counter.count, strategy=request.strategy)
            return _labelled(events, written_by="snippet aligner")
        if prepared.aligner_declined is not None:
            return _labelled(self._server_events(prepared, cancel), aligner_declined=prepared.aligner_declined)
        return self._server_events(prepared, cancel)

    def _server_events(self, prepared: PreparedEdit, cancel: threading.Event | None) -> Iterator[DecodeEvent]:
        request = prepared.request
        options: dict[str, Any] = dict(
            counter=self.counter.count, max_new_tokens=request.max_new_tokens, temperature=request.temperature,
            top_p=request.top_p, seed=request.seed, cancel=cancel,
        )
        if request.strategy == "cad":
            shape = requested_shape(request.instruction, split_lines(request.source)) if self.guard_shapes else None
            return remote_program(self.client, request.source, request.instruction, copy_rest=self.copy_rest,
                                  forward_copies=self.forward_copies, style=self.loaded.spec.prompt, shape=shape,
                                  **options)
        return remote_plain(self.client, request.source, request.instruction, **options)

    def _measure_step(self, context_tokens: int, warmup: int, steps: int) -> float:
        """Seconds per generated token: (time of an N-token request - time of a 1-token request) /
        (N - 1), medians over `steps` pairs after `warmup`, same prompt (cached after the first)."""
        prompt = "Count from 1 to 100: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
        n, samples = 17, []
        for index in range(warmup + steps):
            one = self._timed(prompt, 1)
            many = self._timed(prompt, n)
            produced = many.completion_tokens or self.counter.count(many.text)
            if index >= warmup and produced > 1:
                samples.append(max(0.0, many.seconds - one.seconds) / (produced - 1))
        if not samples:
            raise RemoteError("the server stopped before generating tokens: cannot time a decode step")
        return statistics.median(samples)

    def _timed(self, prompt: str, max_tokens: int) -> Completion:
        started = time.perf_counter()
        done = self.client.complete(self.client.body(prompt, max_tokens=max_tokens))
        done.seconds = time.perf_counter() - started
        return done
