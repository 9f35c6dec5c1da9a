"""The token FSM's state (`FSMState`) and what reading one token's text does to it (`Step`,
`read_text`): the new grammar position, the text cut into tag and gen pieces, the ops finished.
`backend.core.fsm.TokenFSM` says which tokens a state allows; this module moves the state.

Byte-level BPE: a token that is not valid UTF-8 on its own arrives as text holding U+FFFD; such
text is accepted only inside gen TEXT (no tag character is U+FFFD). With `token_bytes` given,
gen text is accumulated as bytes, so a character split across tokens comes out exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from backend.core.char_grammar import BETWEEN, GEN_CLOSE, IN_GEN, IN_TAG, _NEED_N, Core, _step
from backend.core.program import CopyLines, Gen


@dataclass(frozen=True, slots=True)
class FSMState:
    """Where a program stands; immutable and hashable.

    `core` is the grammar position (see the mode table in `backend.core.char_grammar`),
    `n_lines` the input's line count, `body` the UTF-8 bytes of the current gen's text so far,
    including a trailing partial '</gen' (empty outside gen text; not part of the mask).
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
class Step:
    """What one token did: the new state; `pieces`, the token's text cut into ("tag"|"gen", text)
    segments (a '</gen' split across tokens is labelled by what was known at each token); and
    `completed`, the ops (CopyLines / Gen) this token finished."""

    state: FSMState
    pieces: tuple[tuple[str, str], ...]
    completed: tuple[Union[CopyLines, Gen], ...]


def read_text(
    state: FSMState, text: str, raw: Optional[bytes], token_id: Optional[int]
) -> Step:
    """Read `text` from `state` (one token's text, with its raw bytes if known, or forced text).
    Rejects text the grammar does not allow (ValueError); changes nothing."""
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
            body += _run_bytes(text, raw, pending_run)
            pending_run = next(run_iter, None)
        if isinstance(source, tuple):
            completed.append(CopyLines(source[0], source[1]))
        else:
            completed.append(Gen(body[: -len(GEN_CLOSE) + 1].decode("utf-8", "replace")))
            body = b""
    while pending_run is not None:
        body += _run_bytes(text, raw, pending_run)
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


def _run_bytes(text: str, raw: Optional[bytes], run: list[int]) -> bytes:
    """UTF-8 bytes of text[run[0]:run[1]]; exact from the token's raw bytes where the text
    holds U+FFFD (a character split across tokens) and the raw bytes are known."""
    a, b = run
    if raw is None or "\ufffd" not in text or raw.decode("utf-8", "replace") != text:
        return text[a:b].encode("utf-8")
    return raw[_byte_offset(text, raw, a) : _byte_offset(text, raw, b)]


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
