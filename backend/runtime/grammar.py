"""The grammar's mask tensors: the token FSM over one tokenizer, with torch masks cached per allowed set.

The FSM (`backend.core.fsm`) knows token ids and texts only; this module turns its allowed sets
into tensors over the model's logits and samples under them. One `Grammar` per model: the engine
builds it once (`Grammar.for_model(loaded)`, ~0.3 s for SmolLM2's 49k tokens) and hands it to
every decode; nothing is cached in a module global.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from backend.core.char_grammar import GEN_CLOSE
from backend.core.fsm import TokenFSM
from backend.core.fsm_state import FSMState
from backend.core.program import CopyLines
from backend.core.token_vocabulary import TokenVocabulary
from backend.runtime.sampling import sample_token


@dataclass
class Grammar:
    """The token FSM over one tokenizer, with mask tensors cached per allowed set.

    Masks are bool [V] (True = banned), V = the model's logits size (Qwen pads its embedding past
    the tokenizer; ids past the tokenizer are always banned).

    Tokens that would put program text between a copy tag and its copied text (`"/>\\n`, `"/><`
    in some vocabularies) are banned where a copy tag can close: the copied text follows the
    tag's `"/>` directly in the decoding context.

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
    _close_ids: dict[FSMState, tuple[int, ...]] = field(default_factory=dict)
    _gen_close_ids: dict[int, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def for_model(cls, loaded: Any) -> Grammar:
        """The grammar of a loaded model (`handle.ModelHandle`): its tokenizer's vocabulary, its
        logits size and device. Rejects a model without a tokenizer (ValueError)."""
        from backend.runtime.vocab import vocabulary_from_hf

        if loaded.tokenizer is None:
            raise ValueError(f"model {loaded.name} has no tokenizer: it cannot decode text")
        vocabulary = vocabulary_from_hf(loaded.tokenizer)
        return cls(vocabulary, TokenFSM(vocabulary), int(loaded.vocab_size), loaded.device)

    @property
    def eos_id(self) -> int:
        return self.vocabulary.eos_id

    def token_bytes(self, token_id: int) -> bytes:
        raw = self.vocabulary.token_bytes[token_id] if self.vocabulary.token_bytes is not None else None
        if raw is None:
            raw = (self.vocabulary.texts[token_id] or "").encode("utf-8")
        return raw

    def gen_close_ids(self, written: int) -> torch.Tensor:
        """The ids that go on closing a gen whose text ends with the first `written` characters of
        '</gen>': their text is a non-empty prefix of the rest of it, or the rest and more
        (shape_guard.py makes a full gen choose among them). Built once per `written`."""
        found = self._gen_close_ids.get(written)
        if found is None:
            rest = GEN_CLOSE[written:].encode()
            ids = [i for i in range(min(len(self.vocabulary.texts), self.logits_size))
                   if (raw := self.token_bytes(i)) and (rest.startswith(raw) or raw.startswith(rest))]
            found = self._gen_close_ids[written] = torch.tensor(ids, dtype=torch.long, device=self.device)
        return found

    def allowed_ids(self, state: FSMState) -> tuple[int, ...]:
        """The ids the decoder may choose from `state` (the FSM's set, minus tokens that would put
        program text between a copy tag and its copied text). Changes no state beyond caches."""
        allowed = self.fsm.allowed(state)
        if not self.fsm.copy_may_close(state):
            return allowed.ids
        found = self._close_ids.get(state)  # outside gens a state's body is empty: the key is small
        if found is None:
            found = tuple(i for i in allowed.ids if self._closes_cleanly(state, i))
            self._close_ids[state] = found
        return found

    def _index(self, state: FSMState) -> tuple[bool, torch.Tensor]:
        """(True, allowed ids) for a small allowed set, else (False, banned ids). Cached per
        AllowedTokens.key (an int: hashing a 49k-id tuple each step would cost ~0.5 ms), or per
        state where a copy tag can close (small sets, filtered per state)."""
        if self.fsm.copy_may_close(state):
            key: tuple = ("close", state)
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

    def log_probs(self, logits: torch.Tensor, state: FSMState) -> torch.Tensor | None:
        """Log-probabilities [V] (float32) of the next token under `state`'s mask: the softmax over
        the allowed tokens, -inf elsewhere; None if the state allows nothing. `logits` is not changed."""
        small, ids = self._index(state)
        with torch.inference_mode():
            if small:
                if ids.numel() == 0:
                    return None
                masked = torch.full(logits.shape, float("-inf"), dtype=torch.float32, device=logits.device)
                masked[ids] = logits.index_select(0, ids).float()
            else:
                masked = logits.float().clone()
                masked.index_fill_(0, ids, float("-inf"))
            return torch.log_softmax(masked, dim=0)

    def accepts(self, state: FSMState, token_id: int) -> bool:
        """Whether the decoder may choose `token_id` from `state` (see `allowed_ids`)."""
        try:
            self.fsm.advance(state, token_id)
        except ValueError:
            return False
        return not self.fsm.copy_may_close(state) or self._closes_cleanly(state, token_id)

    def _closes_cleanly(self, state: FSMState, token_id: int) -> bool:
        """Whether a token that completes a copy tag ends right at its `"/>` (EOS always does)."""
        if token_id == self.eos_id:
            return True
        step = self.fsm.advance(state, token_id)
        closes = any(isinstance(op, CopyLines) for op in step.completed)
        return not closes or self.fsm.item_just_closed(step.state)
