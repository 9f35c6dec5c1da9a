"""Hybrid copy-as-decode: inside a <gen>, prompt-lookup drafts checked in the same forward.

A changed line usually shares most of its tokens with the line it replaces, and the input is in
the prompt: so while a gen is open, the tokens that followed the last n-gram's earlier occurrence
(in prompt + program so far, `prompt_lookup.prompt_lookup_candidates`) are drafted and enter the
cache together with the pending token in ONE forward (`append_span_all`, logits [P + k, V]).
Each draft is kept while the token the decoder chooses at its position equals it: in model mode
the model's own choice under the grammar mask (greedy output unchanged), in reference mode the
forced program's next token (drafts accepted while they match the target). The first other
choice is taken as the decoder takes any token; the drafts after it leave the cache (rollback).

The decoder owns the steps (`next_token`, `take_token`, `jump_forward`); `GenDrafting` gets them
as functions, so this module does not import the decoder (no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from backend.runtime.prompt_lookup import PromptLookupSetting, prompt_lookup_candidates

DEFAULT_HYBRID = PromptLookupSetting(2, 16)  # drafts inside a gen: a changed line is short


@dataclass
class GenDrafting:
    """The drafting step of one run; `accepted` / `drafted` count draft tokens kept / checked."""

    setting: PromptLookupSetting
    next_token: Callable[[Any, Any], "int | None"]
    take_token: Callable[[Any, int], list[Any]]
    jump_forward: Callable[[Any], list[Any]]
    accepted: int = 0
    drafted: int = 0

    def drafts(self, run: Any) -> list[int]:
        """Drafts for the run's next forward: [] outside an open gen, with nothing pending, or
        with no room left (max_new_tokens, context length)."""
        if run.state.mode != "gen" or not run.pending:
            return []
        room = self.setting.drafts
        if run.max_new_tokens is not None:
            room = min(room, run.max_new_tokens - run.counts.program - 1)
        if run.context_length is not None:
            room = min(room, run.context_length - run.cache.length - len(run.pending))
        if room <= 0:
            return []
        return prompt_lookup_candidates(run.cache.token_ids + run.pending, max_ngram_size=self.setting.ngram,
                                        num_pred_tokens=room, eos_ids=(run.grammar.eos_id,))

    def forward(self, run: Any, drafts: list[int]) -> tuple[Any, list[Any]]:
        """`pending` + drafts in one forward. Returns (logits [V] to choose the next token from,
        or None when a non-draft choice became pending or the run stopped; the events)."""
        pending = len(run.pending)
        rows = run.cache.append_span_all(run.pending + drafts)  # [P + k, V]
        run.pending.clear()
        self.drafted += len(drafts)
        events: list[Any] = []
        for i, proposed in enumerate(drafts):
            token = self.next_token(run, rows[pending - 1 + i])
            if token is None or token != proposed:
                run.cache.rollback(len(drafts) - i)
                if token is not None:
                    events += self.take_token(run, token) + self.jump_forward(run)
                return None, events
            at = len(run.pending)
            events += self.take_token(run, token)
            del run.pending[at]  # the draft is in the cache already
            self.accepted += 1
            events += self.jump_forward(run)
            if run.state.mode != "gen" or run.pending or run.stop_reason is not None:
                run.cache.rollback(len(drafts) - i - 1)
                done = run.pending or run.stop_reason is not None
                return (None if done else rows[pending + i]), events
        return rows[-1], events
