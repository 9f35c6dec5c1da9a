"""Token-level finite-state machine that keeps a decoder inside the copy-as-decode grammar.

The grammar, and what every accepted prefix guarantees, are in `backend.core.char_grammar`.

Layers (imports only the standard library):
- a character automaton over small immutable "cores" (`backend.core.char_grammar`);
- `TokenVocabulary` (`backend.core.token_vocabulary`): token texts sorted for prefix search, built
  once per tokenizer;
- `FSMState` and `Step` (`backend.core.fsm_state`): a state, and what reading a token does to it;
- `TokenFSM` (sglang-like, here): `start`, `allowed`, `advance`, `is_complete`, `forced_text`, and
  the questions a decoder asks of a state: `copy_may_close`, `item_just_closed`, `open_gen_text`.

How a mask is found. Outside gen text a state accepts only a few characters, so the tokens it
allows are found by a depth-first search over the sorted token texts: each step extends a
prefix by one acceptable character and a binary search says whether any token starts with it.
Inside gen text nearly every token is allowed: a token without '>' can never finish '</gen>',
so it is allowed from every gen-text state; only tokens holding '>' are walked. Those twelve
gen-text masks are computed once per vocabulary, lazily.

Masks that do not depend on the line count are cached per "generic" key; a token whose walk
would read a line number with the line count unknown (it would have to hold '<copy lines="'
and a digit) is kept aside and checked per concrete state. Number states are keyed concretely
(digits, I, n_lines); they are cheap to compute.
"""

from __future__ import annotations

import codecs
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Optional

from backend.core.char_grammar import (
    _ANY,
    _NEED_N,
    BETWEEN,
    COPY_CLOSE,
    COPY_OPEN,
    ENDED,
    FIRST_LINE,
    GEN_OPEN,
    IN_GEN,
    IN_TAG,
    LAST_LINE,
    Core,
    _next_chars,
    _step,
    _walk,
)
from backend.core.fsm_state import FSMState, Step, read_text
from backend.core.token_vocabulary import TokenVocabulary

Key = tuple[Any, ...]  # a mask cache key


@dataclass(frozen=True, slots=True)
class AllowedTokens:
    """The tokens a state allows: `ids` sorted (EOS included when allowed); `key` is a small int,
    equal exactly when the id sets are equal, so a caller can cache one tensor per key."""

    key: int
    ids: tuple[int, ...]


_PER_N = AllowedTokens(-1, ())  # TokenFSM._cache: this key's mask also depends on the line count


class TokenFSM:
    """Masks and advances token by token over one `TokenVocabulary`.

    States are immutable values: no method changes a state; only the mask caches grow.

    Measured (2 shared CPU cores, `backend.runtime.vocab.measure_mask_cost`, the oracle programs
    of the first 60 HumanEvalPack-Fix Python cases, ~1.7k steps per vocabulary):
      `warm_up()` (the 48 masks without the line count, once per vocabulary): Qwen2.5 152k
      0.10 s, SmolLM2 49k 0.02 s; lazily, only the states a program reaches.
      `allowed()` cached: median 0.24 µs, p90 0.28 µs (both vocabularies).
      `allowed()` uncached (line-number states recomputed, per-vocabulary masks kept): median
      0.6 µs, p90 10-15 µs, max 51 µs (Qwen) / 66 µs (SmolLM2).
    A SmolLM2 decode step here is ~70 ms: the mask costs < 0.1 % of it even uncached.
    """

    def __init__(self, vocabulary: TokenVocabulary) -> None:
        self.vocabulary = vocabulary
        self._registry: dict[tuple[int, ...], AllowedTokens] = {}
        # mask key -> AllowedTokens, or _PER_N when the mask also depends on the line count
        self._cache: dict[Key, AllowedTokens] = {}
        self._per_n: dict[Key, AllowedTokens] = {}
        # states outside line numbers: (lit or core, has_lines) -> (mask, ids whose walk needs
        # the line count). Per vocabulary: at most 48 keys, kept by clear_state_cache.
        self._generic: dict[Key, tuple[AllowedTokens, tuple[int, ...]]] = {}

    # -- public API -------------------------------------------------------------------------

    def start(self, n_lines: int) -> FSMState:
        """The state before the first token for an input of `n_lines` lines.

        Rejects a negative or non-int n_lines (ValueError)."""
        if not isinstance(n_lines, int) or isinstance(n_lines, bool) or n_lines < 0:
            raise ValueError(f"n_lines must be an int >= 0, got {n_lines!r}")
        return FSMState((BETWEEN, False), n_lines)

    def is_complete(self, state: FSMState) -> bool:
        """Whether the program so far is complete (EOS allowed, or EOS already read)."""
        return state.core[0] in (BETWEEN, ENDED)

    def copy_may_close(self, state: FSMState) -> bool:
        """Whether a token read from `state` may complete a copy tag: inside the copy's line
        numbers or its closing '"/>'. Changes nothing."""
        core = state.core
        return core[0] in (FIRST_LINE, LAST_LINE) or (core[0] == IN_TAG and core[1][:1] == '"')

    def item_just_closed(self, state: FSMState) -> bool:
        """Whether `state` is right after an item's closing '>', before its optional newline."""
        return state.core == (BETWEEN, True)

    def open_gen_text(self, state: FSMState) -> str:
        """The certain text of the open gen ('' outside a gen): its bytes so far minus a trailing
        prefix of '</gen' and any unfinished character. Changes nothing."""
        if state.core[0] != IN_GEN:
            return ""
        partial = state.core[1]
        body = state.body[: len(state.body) - partial] if partial else state.body
        return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(body, final=False)

    def allowed(self, state: FSMState) -> AllowedTokens:
        """The tokens allowed next (EOS included when the program is complete). Never empty
        except after EOS, given a vocabulary that spells every single character. Cached per key."""
        core = state.core
        mode = core[0]
        if mode == FIRST_LINE or mode == LAST_LINE:
            key: Key = (core, state.n_lines)
        elif mode == IN_TAG:
            key = (core[1], state.n_lines > 0)  # I, J carried in the core do not change the mask
        else:
            key = (core, state.n_lines > 0)
        found = self._cache.get(key)
        if found is None:
            found, per_n = self._compute(state)
            if per_n:  # rare: some token here would read a line number
                self._per_n[(key, state.n_lines)] = found
                found = _PER_N
            self._cache[key] = found
            return self._per_n[(key, state.n_lines)] if per_n else found
        if found is _PER_N:
            per_key = (key, state.n_lines)
            hit = self._per_n.get(per_key)
            if hit is None:
                hit, _ = self._compute(state)
                self._per_n[per_key] = hit
            return hit
        return found

    def advance(self, state: FSMState, token_id: int) -> Step:
        """Read one token. Rejects a token the state does not allow (ValueError); changes nothing."""
        vocabulary = self.vocabulary
        core, n = state.core, state.n_lines
        if token_id == vocabulary.eos_id:
            if core[0] != BETWEEN:
                raise ValueError(f"EOS not allowed in state {state.mode!r}: the program is open")
            return Step(FSMState((ENDED,), n), (), ())
        if not 0 <= token_id < len(vocabulary.texts):
            raise ValueError(f"token id {token_id} outside the vocabulary")
        text = vocabulary.texts[token_id]
        if not text:
            raise ValueError(f"token {token_id} is never allowed (special or empty)")
        raw = vocabulary.token_bytes[token_id] if vocabulary.token_bytes is not None else None
        return read_text(state, text, raw, token_id)

    def advance_text(self, state: FSMState, text: str) -> Step:
        """Read `text` as if it were one token (e.g. forced text). Rejects text the grammar does
        not allow from `state` (ValueError); changes nothing."""
        return read_text(state, text, None, None)

    def forced_text(self, state: FSMState) -> str:
        """The longest text the grammar forces from `state`: '' where there is a choice (between
        items EOS is always one; gen text is free). E.g. after '<c' it is 'opy lines="', after the
        last digit of J == n_lines it is '"/>'."""
        core, n = state.core, state.n_lines
        has_lines = n > 0
        forced: list[str] = []
        while True:
            chars = _next_chars(core, n, has_lines)
            if chars is _ANY or core[0] in (BETWEEN, ENDED) or len(chars) != 1:
                return "".join(forced)
            forced.append(chars)
            core = _step(core, chars, n, has_lines)

    def warm_up(self) -> None:
        """Compute every mask that does not depend on the line count (48 keys: between items,
        tag literals, gen text; once per vocabulary). Optional: `allowed` computes them lazily."""
        literals = [COPY_OPEN[:i] for i in range(1, len(COPY_OPEN))]
        literals += [GEN_OPEN[:i] for i in range(2, len(GEN_OPEN))]
        literals += [COPY_CLOSE[:i] for i in range(1, len(COPY_CLOSE))]
        cores: list[Core] = [(BETWEEN, False), (BETWEEN, True)]
        cores += [(IN_TAG, lit, 0, 0) for lit in literals]
        cores += [(IN_GEN, partial, has_text) for partial in range(6) for has_text in (False, True)]
        for has_lines in (False, True):
            for core in cores:
                self._generic_mask(core, has_lines)

    def clear_state_cache(self) -> None:
        """Forget the masks that depend on the line count (number states) and the per-state
        lookup cache; keep the per-vocabulary masks (see `warm_up`). For measuring."""
        self._cache.clear()
        self._per_n.clear()

    # -- masks --------------------------------------------------------------------------------

    def _register(self, ids: tuple[int, ...]) -> AllowedTokens:
        found = self._registry.get(ids)
        if found is None:
            found = AllowedTokens(len(self._registry), ids)
            self._registry[ids] = found
        return found

    def _compute(self, state: FSMState) -> tuple[AllowedTokens, bool]:
        """The mask of `state` and whether it depends on the concrete line count beyond the
        state's key (only when some token's walk would read a line number)."""
        core, n = state.core, state.n_lines
        has_lines = n > 0
        mode = core[0]
        if mode == ENDED:
            return self._register(()), False
        if mode == FIRST_LINE or mode == LAST_LINE:
            found, _ = self._search(core, n, has_lines)
            return self._register(tuple(sorted(found))), False
        sure, needs_n = self._generic_mask(core, has_lines)
        if not needs_n:
            return sure, False
        texts = self.vocabulary.texts
        extra = [i for i in needs_n if _walk(core, texts[i], n, has_lines) is not None]  # type: ignore[arg-type]
        return self._register(tuple(sorted(sure.ids + tuple(extra)))), True

    def _generic_mask(self, core: Core, has_lines: bool) -> tuple[AllowedTokens, tuple[int, ...]]:
        """Mask of a state outside line numbers, without the line count: (allowed ids, ids whose
        walk needs the line count). Computed once per vocabulary (kept by clear_state_cache)."""
        key = (core[1] if core[0] == IN_TAG else core, has_lines)
        entry = self._generic.get(key)
        if entry is not None:
            return entry
        vocabulary = self.vocabulary
        if core[0] == IN_GEN:
            found: list[int] = []
            needs_n: list[int] = []
            for text in vocabulary.gt_texts:
                end = _walk(core, text, None, has_lines)
                if end is _NEED_N:
                    needs_n.extend(vocabulary.ids_by_text[text])
                elif end is not None:
                    found.extend(vocabulary.ids_by_text[text])
            ids = tuple(sorted((*vocabulary.no_gt_ids, *found))) if found else vocabulary.no_gt_ids
        else:
            found, needs_n = self._search(core, None, has_lines)
            if core[0] == BETWEEN:
                found.append(vocabulary.eos_id)
            ids = tuple(sorted(found))
        entry = (self._register(ids), tuple(sorted(needs_n)))
        self._generic[key] = entry
        return entry

    def _search(self, core: Core, n: Optional[int], has_lines: bool) -> tuple[list[int], list[int]]:
        """Depth-first search over the sorted token texts from `core` (not gen text): (allowed
        ids, ids whose walk needs the line count)."""
        vocabulary = self.vocabulary
        texts = vocabulary.sorted_texts
        ids_by_text = vocabulary.ids_by_text
        size = len(texts)
        found: list[int] = []
        needs_n: list[int] = []
        stack: list[tuple[Core, str]] = [(core, "")]
        while stack:
            here, prefix = stack.pop()
            at = bisect_left(texts, prefix)
            if prefix and at < size and texts[at] == prefix:
                found.extend(ids_by_text[prefix])
                at += 1
            if at == size or not texts[at].startswith(prefix):
                continue  # no longer token starts with prefix
            chars = _next_chars(here, n, has_lines)
            if chars is _ANY or chars is _NEED_N:
                depth = len(prefix)
                while at < size and texts[at].startswith(prefix):
                    text = texts[at]
                    end = _walk(here, text[depth:], n, has_lines)
                    if end is _NEED_N:
                        needs_n.extend(ids_by_text[text])
                    elif end is not None:
                        found.extend(ids_by_text[text])
                    at += 1
                continue
            for ch in chars:
                stack.append((_step(here, ch, n, has_lines), prefix + ch))
        return found, needs_n
