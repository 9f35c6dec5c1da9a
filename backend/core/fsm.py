"""Token-level finite-state machine that keeps a decoder inside the copy-as-decode grammar.

```
program := item* EOS ;  item := (copy | gen) "\\n"?
copy    := '<copy lines="' I '-' J '"/>'     1 <= I <= J <= n_lines, INT = [1-9][0-9]*
gen     := '<gen>' TEXT '</gen>'             TEXT non-empty, never containing '</gen>'
```

Every prefix this FSM accepts extends to a valid program for the input at hand: line numbers
stay within 1..n_lines with I <= J (a digit is allowed only if some number in range starts with
the digits so far), EOS only between items (an empty program included; the runtime decides
what to do with it). `<copy tokens=...>` is not offered: the decoder emits line copies only.

Layers (imports only the standard library):
- a character automaton over small immutable "cores" (`_step`, `_next_chars`);
- `TokenVocabulary`: token texts sorted for prefix search, built once per tokenizer;
- `TokenFSM` (sglang-like): `start`, `allowed`, `advance`, `is_complete`, `forced_text`, and the
  questions a decoder asks of a state: `copy_may_close`, `item_just_closed`, `open_gen_text`.

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

Byte-level BPE: a token that is not valid UTF-8 on its own arrives as text holding U+FFFD; such
text is accepted only inside gen TEXT (no tag character is U+FFFD). With `token_bytes` given,
gen text is accumulated as bytes, so a character split across tokens comes out exactly.
"""

from __future__ import annotations

import codecs
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from backend.core.program import CopyLines, Gen

COPY_OPEN = '<copy lines="'
GEN_OPEN = "<gen>"
COPY_CLOSE = '"/>'
GEN_CLOSE = "</gen>"
_DIGITS = "0123456789"

# The grammar position ("core") is a small tuple whose first element names the mode. Tuples, not
# classes: `_step` builds one per character while masks are searched (~0.1 s per vocabulary).
BETWEEN = "between"   # (BETWEEN, newline_ok)        between items; EOS allowed; newline_ok: an item
                      #                              just ended and its optional "\n" is not read yet
IN_TAG = "tag"        # (IN_TAG, lit, I, J)          inside a tag literal; lit = text matched so far of
                      #                              COPY_OPEN, GEN_OPEN or COPY_CLOSE (I, J carried to '>')
FIRST_LINE = "first"  # (FIRST_LINE, digits)         the copy's first line number
LAST_LINE = "last"    # (LAST_LINE, digits, I)       the copy's last line number
IN_GEN = "gen"        # (IN_GEN, partial, has_text)  gen TEXT; partial = length of the trailing prefix of
                      #                              '</gen>', has_text = some text precedes that prefix
ENDED = "end"         # (ENDED,)                     after EOS

_ANY = object()  # _next_chars: every character (gen TEXT)
_NEED_N = object()  # _next_chars / _step: the line count is needed and unknown

Core = tuple[Any, ...]
Key = tuple[Any, ...]  # a mask cache key


def _extendable(digits: str, low: int, high: int) -> bool:
    """Whether some INT in [low, high] has decimal form starting with `digits` (no leading zero)."""
    if not digits or digits[0] == "0":
        return False
    value = int(digits)
    scale = 1
    while value * scale <= high:
        if (value + 1) * scale - 1 >= low:
            return True
        scale *= 10
    return False


def _step(core: Core, ch: str, n: Optional[int], has_lines: bool) -> Any:
    """The core after reading `ch`, None when `ch` is not allowed, or _NEED_N when reading it
    needs the line count and `n` is None. Changes nothing."""
    mode = core[0]
    if mode == IN_GEN:
        partial, has_text = core[1], core[2]
        if partial == 5:
            if ch == ">":
                return (BETWEEN, True) if has_text else None
            return (IN_GEN, 1, True) if ch == "<" else (IN_GEN, 0, True)
        if ch == GEN_CLOSE[partial]:
            return (IN_GEN, partial + 1, has_text)
        if ch == "<":
            return (IN_GEN, 1, has_text or partial > 0)
        return (IN_GEN, 0, True)
    if mode == BETWEEN:
        if ch == "<":
            return (IN_TAG, "<", 0, 0)
        if ch == "\n" and core[1]:
            return (BETWEEN, False)
        return None
    if mode == IN_TAG:
        lit = core[1]
        if lit == "<":
            if ch == "g":
                return (IN_TAG, "<g", 0, 0)
            if ch == "c" and has_lines:
                return (IN_TAG, "<c", 0, 0)
            return None
        target = COPY_CLOSE if lit[0] == '"' else (COPY_OPEN if lit[1] == "c" else GEN_OPEN)
        if ch != target[len(lit)]:
            return None
        lit += ch
        if len(lit) < len(target):
            return (IN_TAG, lit, core[2], core[3])
        if target is COPY_OPEN:
            return (FIRST_LINE, "")
        if target is GEN_OPEN:
            return (IN_GEN, 0, False)
        return (BETWEEN, True)
    if mode == FIRST_LINE or mode == LAST_LINE:
        if n is None:  # only reachable as (FIRST_LINE, ""): a digit needs n, nothing else is allowed
            return _NEED_N if "0" <= ch <= "9" else None
        digits = core[1]
        low = 1 if mode == FIRST_LINE else core[2]
        if "0" <= ch <= "9":
            if _extendable(digits + ch, low, n):
                return (mode, digits + ch) if mode == FIRST_LINE else (LAST_LINE, digits + ch, low)
            return None
        if not digits or not (low <= int(digits) <= n):
            return None
        if mode == FIRST_LINE and ch == "-":
            return (LAST_LINE, "", int(digits))
        if mode == LAST_LINE and ch == '"':
            return (IN_TAG, '"', low, int(digits))
        return None
    return None


def _next_chars(core: Core, n: Optional[int], has_lines: bool) -> Any:
    """The characters `_step` accepts from `core`: a string, _ANY (gen TEXT), or _NEED_N."""
    mode = core[0]
    if mode == IN_GEN:
        return _ANY
    if mode == BETWEEN:
        return "<\n" if core[1] else "<"
    if mode == IN_TAG:
        lit = core[1]
        if lit == "<":
            return "cg" if has_lines else "g"
        target = COPY_CLOSE if lit[0] == '"' else (COPY_OPEN if lit[1] == "c" else GEN_OPEN)
        return target[len(lit)]
    if mode == FIRST_LINE or mode == LAST_LINE:
        if n is None:
            return _NEED_N
        return "".join(ch for ch in _DIGITS + '-"' if _step(core, ch, n, has_lines) is not None)
    return ""


def _walk(core: Core, text: str, n: Optional[int], has_lines: bool) -> Any:
    """`_step` over every character of `text`: the final core, None, or _NEED_N."""
    for ch in text:
        core = _step(core, ch, n, has_lines)
        if core is None or core is _NEED_N:
            return core
    return core


@dataclass(frozen=True, slots=True)
class FSMState:
    """Where a program stands; immutable and hashable.

    `core` is the grammar position (see the mode table above), `n_lines` the input's line count,
    `body` the UTF-8 bytes of the current gen's text so far, including a trailing partial
    '</gen' (empty outside gen text; not part of the mask).
    """

    core: Core
    n_lines: int
    body: bytes = b""

    @property
    def mode(self) -> str:
        """BETWEEN, IN_TAG, FIRST_LINE, LAST_LINE, IN_GEN or ENDED: 'between', 'tag', 'first',
        'last', 'gen' or 'end'."""
        mode: str = self.core[0]
        return mode


@dataclass(frozen=True, slots=True)
class AllowedTokens:
    """The tokens a state allows: `ids` sorted (EOS included when allowed); `key` is a small int,
    equal exactly when the id sets are equal, so a caller can cache one tensor per key."""

    key: int
    ids: tuple[int, ...]


_PER_N = AllowedTokens(-1, ())  # TokenFSM._cache: this key's mask also depends on the line count


@dataclass(frozen=True, slots=True)
class Step:
    """What one token did: the new state; `pieces`, the token's text cut into ("tag"|"gen", text)
    segments (a '</gen' split across tokens is labelled by what was known at each token); and
    `completed`, the ops (CopyLines / Gen) this token finished."""

    state: FSMState
    pieces: tuple[tuple[str, str], ...]
    completed: tuple[Union[CopyLines, Gen], ...]


class TokenVocabulary:
    """Token texts indexed for prefix search; built once per tokenizer.

    `texts[i]` is token i's text, None for a token never allowed (special tokens). Empty texts are
    never allowed either. `eos_id`'s text is ignored. `token_bytes`, if given, holds each token's
    raw bytes, used to make gen text exact where a token's text holds U+FFFD (a split character).
    Rejects an `eos_id` outside the vocabulary and a `token_bytes` of another length (ValueError).
    """

    def __init__(
        self,
        texts: Sequence[Optional[str]],
        eos_id: int,
        *,
        token_bytes: Optional[Sequence[Optional[bytes]]] = None,
    ) -> None:
        if not 0 <= eos_id < len(texts):
            raise ValueError(f"eos_id {eos_id} outside a vocabulary of {len(texts)} tokens")
        if token_bytes is not None and len(token_bytes) != len(texts):
            raise ValueError(f"token_bytes has {len(token_bytes)} entries, texts {len(texts)}")
        self.texts: tuple[Optional[str], ...] = tuple(texts)
        self.eos_id = eos_id
        self.token_bytes = tuple(token_bytes) if token_bytes is not None else None
        by_text: dict[str, list[int]] = {}
        for token_id, text in enumerate(self.texts):
            if text and token_id != eos_id:
                by_text.setdefault(text, []).append(token_id)
        self.sorted_texts: list[str] = sorted(by_text)
        self.ids_by_text: dict[str, tuple[int, ...]] = {t: tuple(v) for t, v in by_text.items()}
        # Gen TEXT: tokens without '>' never finish '</gen>' (see module docstring).
        self.gt_texts: list[str] = [t for t in self.sorted_texts if ">" in t]
        gt = set(self.gt_texts)
        self.no_gt_ids: tuple[int, ...] = tuple(
            sorted(i for t, ids in self.ids_by_text.items() if t not in gt for i in ids)
        )

    def __len__(self) -> int:
        return len(self.texts)


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
        return self._advance_text(state, text, raw, token_id)

    def advance_text(self, state: FSMState, text: str) -> Step:
        """Read `text` as if it were one token (e.g. forced text). Rejects text the grammar does
        not allow from `state` (ValueError); changes nothing."""
        return self._advance_text(state, text, None, None)

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

    # -- advancing ----------------------------------------------------------------------------

    def _advance_text(
        self, state: FSMState, text: str, raw: Optional[bytes], token_id: Optional[int]
    ) -> Step:
        core, n = state.core, state.n_lines
        has_lines = n > 0
        kinds: list[str] = []  # per character: "tag" or "gen"
        events: list[tuple[int, Union[tuple[int, int], int]]] = []  # (char index, op source)
        gen_runs: list[list[int]] = []  # [start, end) char ranges consumed as gen text
        for index, ch in enumerate(text):
            before = core
            core = _step(core, ch, n, has_lines)
            if core is None or core is _NEED_N:
                what = f"token {token_id} ({text!r})" if token_id is not None else repr(text)
                raise ValueError(f"{what} not allowed at char {index} in state {state.mode!r}")
            if before[0] == IN_GEN:
                if core[0] == IN_GEN:
                    kinds.append("gen")
                    if gen_runs and gen_runs[-1][1] == index:
                        gen_runs[-1][1] = index + 1
                    else:
                        gen_runs.append([index, index + 1])
                else:  # the '>' closing '</gen>': the 5 chars before it are tag too
                    kinds.append("tag")
                    for back in range(index - 1, max(index - 6, -1), -1):
                        kinds[back] = "tag"
                    events.append((index, index))
            else:
                kinds.append("tag")
                if before[0] == IN_TAG and core[0] == BETWEEN:
                    events.append((index, (before[2], before[3])))
        # Gen bytes: each run of gen chars appended to the body; a closing '>' ends the body.
        body = state.body
        completed: list[Union[CopyLines, Gen]] = []
        run_iter = iter(gen_runs)
        pending_run = next(run_iter, None)
        for index, source in events:
            while pending_run is not None and pending_run[1] <= index:
                body += self._run_bytes(text, raw, pending_run)
                pending_run = next(run_iter, None)
            if isinstance(source, tuple):
                completed.append(CopyLines(source[0], source[1]))
            else:
                completed.append(Gen(body[: -len(GEN_CLOSE) + 1].decode("utf-8", "replace")))
                body = b""
        while pending_run is not None:
            body += self._run_bytes(text, raw, pending_run)
            pending_run = next(run_iter, None)
        if core[0] != IN_GEN:
            body = b""
        pieces: list[tuple[str, str]] = []
        start = 0
        for index in range(1, len(text) + 1):
            if index == len(text) or kinds[index] != kinds[start]:
                pieces.append((kinds[start], text[start:index]))
                start = index
        return Step(FSMState(core, n, body), tuple(pieces), tuple(completed))

    @staticmethod
    def _run_bytes(text: str, raw: Optional[bytes], run: list[int]) -> bytes:
        """UTF-8 bytes of text[run[0]:run[1]]; exact from the token's raw bytes where the text
        holds U+FFFD (a character split across tokens) and the raw bytes are known."""
        a, b = run
        if raw is None or "\ufffd" not in text or raw.decode("utf-8", "replace") != text:
            return text[a:b].encode("utf-8")
        return raw[_byte_offset(text, raw, a) : _byte_offset(text, raw, b)]

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


def _byte_offset(text: str, raw: bytes, index: int) -> int:
    """The byte offset in `raw` matching char offset `index` of text = raw.decode(replace).
    Defined at boundaries next to ASCII (where tags are); falls back to a UTF-8 length."""
    for offset in range(len(raw) + 1):
        if (
            raw[:offset].decode("utf-8", "replace") == text[:index]
            and raw[offset:].decode("utf-8", "replace") == text[index:]
        ):
            return offset
    return len(text[:index].encode("utf-8"))
