"""What the grammar's mask adds to a decode step on a runtime (issue 11: the mask cost on llama.cpp).

At every state of a corpus's oracle programs: the decoder's masked pick (`Grammar.choose`, greedy)
on the runtime's own logits against plain decoding's pick (`argmax`), median microseconds each;
their difference over the runtime's plain decode step (median, same run) is the mask's share of a
step. The FSM's own work (`fsm.allowed`, cached in steady decoding) is inside `choose`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Sequence

from backend.runtime.grammar import Grammar
from backend.runtime.vocab import program_states


def mask_share(engine: Any, programs_token_ids: Sequence[Sequence[int]], n_lines: int, *, repeats: int = 3) -> dict[str, Any]:
    """`engine`: an EditEngine on an in-process runtime. Returns the medians and the share."""
    loaded = engine.loaded
    grammar = Grammar.for_model(loaded)
    states = program_states(grammar.fsm, programs_token_ids, n_lines)
    logits = _real_logits(loaded, [token for program in programs_token_ids[:1] for token in program])
    for state in states:  # warm the FSM's and the grammar's caches, as in steady decoding
        grammar.choose(logits.clone(), state, 0.0, 1.0, None)
    masked, plain = [], []
    for _ in range(repeats):
        for state in states:
            masked.append(_timed(lambda copy=logits.clone(), state=state: grammar.choose(copy, state, 0.0, 1.0, None)))
            plain.append(_timed(lambda copy=logits.clone(): int(copy.argmax())))
    step = engine.step_seconds(warmup=5, steps=31)
    masked_us, plain_us = statistics.median(masked) * 1e6, statistics.median(plain) * 1e6
    return {
        "runtime": loaded.runtime,
        "model": loaded.name,
        "states": len(states),
        "masked_pick_us": round(masked_us, 2),
        "plain_pick_us": round(plain_us, 2),
        "mask_overhead_us": round(masked_us - plain_us, 2),
        "step_ms": round(step * 1000, 3),
        "share_of_step": round((masked_us - plain_us) / (step * 1e6), 5),
    }


def _real_logits(loaded: Any, token_ids: list[int]) -> Any:
    """Logits [V] this runtime returns after a few real tokens (the values do not change the cost)."""
    cache = loaded.new_cache()
    return cache.append_span(token_ids[:64] or [loaded.eos_ids[0]])


def _timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started
