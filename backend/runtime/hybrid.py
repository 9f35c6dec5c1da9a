"""Drafts checked in the same forward as the pending tokens: predicted tag openings (always) and,
in hybrid copy-as-decode, prompt-lookup drafts inside a <gen>.

Tag drafts. A program alternates copies and gens, so the next item's opening is predictable: after
a copy comes `<gen>` (or the end), after a gen `\\n<copy lines="I-` with I the line after those the
gen most likely replaced. Those tokens are appended to the forward that enters the copied span (or
the gen's close): a span forward is wide anyway, so the few extra positions cost little, and every
accepted one is a decode step saved ('<', 'copy' / 'gen' and each digit are choices the model
makes, one step each without a draft).

Gen drafts (hybrid). A changed line usually shares most of its tokens with the line it replaces,
and the input is in the prompt: so while a gen is open, the tokens that followed the last n-gram's
earlier occurrence (in prompt + program so far, `prompt_lookup.prompt_lookup_candidates`) are
drafted and enter the cache together with the pending token in ONE forward.

Either way each draft is kept while the token the decoder chooses at its position equals it: in
model mode the model's own choice under the grammar mask (greedy output unchanged; with sampling,
the token is drawn from the model's distribution at that position, so the output distribution is
unchanged too), in reference mode the forced program's next token (drafts accepted while they
match the target). The first other choice is taken as the decoder takes any token; the drafts
after it leave the cache (rollback). Forced text after an accepted token (jump-forward) that the
drafts already hold is in the cache already and is not entered again.

The decoder owns the steps (`next_token`, `take_token`, `jump_forward`); `Drafting` gets them as
functions, so this module does not import the decoder (no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from backend.core.char_grammar import COPY_OPEN, GEN_OPEN
from backend.core.lines import line_count
from backend.core.program import CopyLines, Gen, Op
from backend.runtime.program_text import encode_text
from backend.runtime.prompt_lookup import PromptLookupSetting, prompt_lookup_candidates

DEFAULT_HYBRID = PromptLookupSetting(2, 16)  # drafts inside a gen: a changed line is short


@dataclass
class Drafting:
    """The drafting step of one run. `gen_setting` None: no gen drafts (plain copy-as-decode);
    `tags` False: no tag drafts (for measuring what they save). Counts: `accepted` / `drafted` gen
    draft tokens kept / checked; `tag_accepted` / `tag_drafted` the same for tag drafts, where
    `tag_accepted` counts only the tokens the decoder chose (each a decode step saved), not the
    forced ones jump-forward would have entered anyway, and not one whose forced text (and copy)
    still needs a forward of its own: so each counted token is exactly one forward saved."""

    gen_setting: PromptLookupSetting | None
    next_token: Callable[[Any, Any], "int | None"]
    take_token: Callable[[Any, int], list[Any]]
    jump_forward: Callable[[Any], list[Any]]
    tags: bool = True
    accepted: int = 0
    drafted: int = 0
    tag_accepted: int = 0
    tag_drafted: int = 0
    _openings: dict[str, list[int]] = field(default_factory=dict)

    def drafts(self, run: Any) -> tuple[str, list[int]]:
        """("tag" | "gen", drafts) for the run's next forward; ("", []) when there are none: nothing
        pending, no room left (max_new_tokens, context length), or nothing to predict."""
        if not run.pending:
            return "", []
        room = self._room(run)
        if room <= 0:
            return "", []
        if run.state.mode == "between" and run.ops and self.tags:
            return "tag", self._opening(run)[:room]
        if run.state.mode == "gen" and self.gen_setting is not None:
            room = min(room, self.gen_setting.drafts)
            return "gen", prompt_lookup_candidates(run.cache.token_ids + run.pending,
                                                   max_ngram_size=self.gen_setting.ngram,
                                                   num_pred_tokens=room, eos_ids=(run.grammar.eos_id,))
        return "", []

    def _room(self, run: Any) -> int:
        room = 1 << 30
        if run.max_new_tokens is not None:
            room = min(room, run.max_new_tokens - run.counts.program - 1)
        if run.context_length is not None:
            room = min(room, run.context_length - run.cache.length - len(run.pending))
        return room

    def _opening(self, run: Any) -> list[int]:
        """The predicted next item's opening tokens: `<gen>` after a copy; after a gen
        `\\n<copy lines="I-` (without the newline when it is already read), I the line after the
        lines the gen most likely replaced (`next_copy_start`), or without `I-` when none fits."""
        if isinstance(run.ops[-1], CopyLines):
            text = GEN_OPEN
        else:
            text = ("\n" if run.fsm.item_just_closed(run.state) else "") + COPY_OPEN
            start = next_copy_start(run.ops, run.state.n_lines)
            text += f"{start}-" if start is not None else ""
        if text not in self._openings:
            self._openings[text] = encode_text(run.tokenizer, text)
        return self._openings[text]

    def forward(self, run: Any, source: str, drafts: list[int]) -> tuple[Any, list[Any]]:
        """`pending` + drafts in one forward. Returns (logits [V] to choose the next token from,
        or None when a non-draft choice became pending or the run stopped; the events)."""
        # rows [k + 1, V]: rows[i] predicts drafts[i], rows[-1] the token after the last draft
        rows = run.cache.append_span_all(run.pending + drafts, rows=len(drafts) + 1)
        run.pending.clear()
        if source == "tag":
            self.tag_drafted += len(drafts)
        else:
            self.drafted += len(drafts)
        events: list[Any] = []
        used = 0  # drafts confirmed so far (in the cache and in the program)
        while used < len(drafts):
            token = self.next_token(run, rows[used])
            if token is None or token != drafts[used]:
                run.cache.rollback(len(drafts) - used)
                if token is not None:
                    events += self.take_token(run, token) + self.jump_forward(run)
                return None, events
            at = len(run.pending)
            events += self.take_token(run, token)
            del run.pending[at]  # the draft is in the cache already
            used += 1
            events += self.jump_forward(run)
            while run.pending and used < len(drafts) and run.pending[0] == drafts[used]:
                del run.pending[0]  # forced text the drafts already entered
                used += 1
            if source == "gen":
                self.accepted += 1
            elif not run.pending:  # a step saved, unless its forced text still needs a forward
                self.tag_accepted += 1
            leaving_gen = source == "gen" and run.state.mode != "gen"
            if run.pending or run.stop_reason is not None or leaving_gen:
                run.cache.rollback(len(drafts) - used)
                done = run.pending or run.stop_reason is not None
                return (None if done else rows[used]), events
        return rows[-1], events


def next_copy_start(ops: list[Op], n_lines: int) -> int | None:
    """After a gen: the first line of the copy most likely next, for a gen that replaced as many
    input lines as it wrote (a changed line, a renamed block): the previous copy's end + 1 + the
    gen's line count. None when that is past the input or the last op is not a gen."""
    if not ops or not isinstance(ops[-1], Gen):
        return None
    copied_to = next((op.end for op in reversed(ops) if isinstance(op, CopyLines)), 0)
    start = copied_to + 1 + line_count(ops[-1].text)
    return start if start <= n_lines else None
