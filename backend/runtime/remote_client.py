"""A streaming client of an OpenAI-compatible completions endpoint, in each engine's dialect.

    POST {url}/v1/completions   {"prompt", "max_tokens", "temperature", "top_p", "stop", "stream": true, ...}

Structured output differs per engine (checked against their documented APIs, see docs/DEPLOY.md):
- vLLM (>= 0.12): `"structured_outputs": {"regex": ...}` (the older `guided_regex` was removed in
  0.12); prefix caching is on by default in the V1 engine.
- SGLang: top-level `"regex": ...` (or `"ebnf"`) in the completions request; the radix cache
  reuses prefixes by default. Its streamed choices say which stop string matched (`matched_stop`).
- llama.cpp: `"grammar": <GBNF>`; llama.cpp's `llama-server` keeps the prompt's KV cache with
  `"cache_prompt": true`, and llama-cpp-python's `llama_cpp.server` reuses the longest common
  prefix of consecutive requests by itself.
Only llama-cpp-python's server runs on this machine (the tests start it); the vLLM / SGLang
request shapes are unit-tested against the documented fields only.

Standard library only (urllib): no HTTP dependency to install, and the server streams
server-sent events, one `data: {json}` line per chunk, ended by `data: [DONE]`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

ENGINE_KINDS = ("vllm", "sglang", "llamacpp")


class RemoteError(RuntimeError):
    """The server could not be reached or answered with an error (the message says which)."""


@dataclass(frozen=True)
class ItemGrammar:
    """One grammar in the two notations engines take: a regular expression and GBNF."""

    regex: str
    gbnf: str


@dataclass
class Completion:
    """What one streamed request returned (filled in as the chunks arrive)."""

    text: str = ""
    finish_reason: str | None = None
    matched_stop: str | None = None          # SGLang matched_stop / vLLM stop_reason, when given
    chunks: int = 0
    completion_tokens: int | None = None     # the server's usage, when it reports one
    first_chunk_seconds: float | None = None
    seconds: float = 0.0
    pieces: list[str] = field(default_factory=list)


def request_body(
    kind: str,
    prompt: str,
    *,
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop: tuple[str, ...] = (),
    grammar: ItemGrammar | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """The JSON body of a streamed completions request for engine `kind`. Rejects an unknown kind
    and max_tokens < 1 (ValueError)."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine kind {kind!r}: use one of {', '.join(ENGINE_KINDS)}")
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    body: dict[str, Any] = {
        "prompt": prompt, "max_tokens": int(max_tokens), "temperature": float(temperature),
        "top_p": float(top_p), "stream": True,
    }
    if model:
        body["model"] = model
    if stop:
        body["stop"] = list(stop)
    if seed is not None:
        body["seed"] = int(seed)
    if kind == "llamacpp":
        # llama.cpp servers default to a repeat penalty and top-k / min-p cut-offs; off here, so
        # temperature 0 is greedy and sampling is the plain temperature + top-p of the other runtimes
        body.update(cache_prompt=True, repeat_penalty=1.0, top_k=0, min_p=0.0)
        if grammar is not None:
            body["grammar"] = grammar.gbnf
    else:
        body["stream_options"] = {"include_usage": True}
        if grammar is not None:
            if kind == "vllm":
                body["structured_outputs"] = {"regex": grammar.regex}
            else:
                body["regex"] = grammar.regex
    return body


def _sse_events(response: Any) -> Iterator[dict[str, Any]]:
    for raw in response:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


class CompletionsClient:
    """Streams completions from one server. `url` is the server root (".../v1" is accepted too)."""

    def __init__(self, url: str, kind: str, *, model: str | None = None, timeout: float = 600.0) -> None:
        if kind not in ENGINE_KINDS:
            raise ValueError(f"unknown engine kind {kind!r}: use one of {', '.join(ENGINE_KINDS)}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"engine URL must start with http:// or https://, got {url!r}")
        self.root = url.rstrip("/").removesuffix("/v1")
        self.kind = kind
        self.model = model
        self.timeout = timeout

    def body(self, prompt: str, **options: Any) -> dict[str, Any]:
        return request_body(self.kind, prompt, model=self.model, **options)

    def stream(self, body: dict[str, Any]) -> Iterator[str | Completion]:
        """Yields each text piece as it arrives, then the finished Completion (last item)."""
        started = time.perf_counter()
        request = urllib.request.Request(
            self.root + "/v1/completions", data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"}, method="POST",
        )
        done = Completion()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                for event in _sse_events(response):
                    piece = self._take(event, done, started)
                    if piece:
                        yield piece
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")[:300]
            raise RemoteError(f"{self.kind} server at {self.root} answered {error.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as error:
            raise RemoteError(f"cannot reach the {self.kind} server at {self.root}: {error}") from None
        done.seconds = time.perf_counter() - started
        yield done

    def _take(self, event: dict[str, Any], done: Completion, started: float) -> str:
        if "error" in event:
            raise RemoteError(f"{self.kind} server error: {event['error']}")
        usage = event.get("usage")
        if usage and usage.get("completion_tokens") is not None:
            done.completion_tokens = int(usage["completion_tokens"])
        piece = ""
        for choice in event.get("choices") or []:
            piece += choice.get("text") or ""
            done.finish_reason = choice.get("finish_reason") or done.finish_reason
            stop = choice.get("matched_stop", choice.get("stop_reason"))
            if isinstance(stop, str):
                done.matched_stop = stop
        if piece:
            done.chunks += 1
            if done.first_chunk_seconds is None:
                done.first_chunk_seconds = time.perf_counter() - started
            done.text += piece
            done.pieces.append(piece)
        return piece

    def complete(self, body: dict[str, Any]) -> Completion:
        """The whole streamed completion at once."""
        for item in self.stream(body):
            if isinstance(item, Completion):
                return item
        raise RemoteError("the stream ended without a result")
