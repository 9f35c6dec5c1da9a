"""Program text as the decoder sees it: tokens in, ("tag" | "gen", text) segments out, and the
next token of a forced program (reference replay).

- `encode_text(tokenizer, text)`: token ids of text as plain text (special-token strings stay text).
- `tokenize_before_item(tokenizer, text)`: a copy's text tokenised as the trained context has it
  when more program follows it.
- `ProgramStream`: splits the program's bytes, fed token by token, into tag / gen segments.
- `ForcedProgram`: the canonical tokens of a program forced through the decoder, segment by segment.
- `check_forced(program, source)`: rejects a forced program the decoder cannot replay.
"""

from __future__ import annotations

import codecs
from typing import Any

from backend.core.fsm_state import FSMState
from backend.core.program import GEN_CLOSE, GEN_OPEN, CopyLines, Gen, parse_program
from backend.core.resolve import resolve_program
from backend.runtime.grammar import Grammar


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` as plain text: `<|im_end|>` inside a source file stays ordinary text."""
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def tokenize_before_item(tokenizer: Any, text: str) -> list[int]:
    """`text` tokenised as it is when the next program item's `<` follows it, not at the end.

    Why: a byte-level BPE pre-tokenizer leaves a run of whitespace whole at the end of a string
    but splits its last character off when a non-space follows. The trainer tokenises each answer
    whole (backend/training/examples.py), so a copy ending on a blank line is `\\n` `\\n` before the
    `<gen>` that follows, while the copy's text tokenised alone ends in one `\\n\\n` token: a
    context the model never saw, after which the trained model chose EOS instead of `<gen>`
    (docs/results.md, "A copy that ends on a blank line"). Tokenising with the `<` and dropping
    its token gives the trained split; if `<` merged with the text's end (it cannot after a line
    end), the text alone is tokenised."""
    ids = encode_text(tokenizer, text + "<")
    if ids and tokenizer.decode(ids[-1:]) == "<":
        return ids[:-1]
    return encode_text(tokenizer, text)


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


def check_forced(program: str, source: str) -> None:
    """Rejects a forced program that is malformed or does not fit the source (ValueError)."""
    ops = parse_program(program)
    if any(not isinstance(op, (CopyLines, Gen)) for op in ops):
        raise ValueError("forced program: only line copies and gens can be decoded")
    if any(isinstance(op, Gen) and not op.text for op in ops):
        raise ValueError("forced program: an empty gen cannot be decoded")
    resolve_program(ops, source)
