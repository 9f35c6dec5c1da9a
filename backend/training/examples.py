"""A case -> token ids and labels, laid out exactly as the decoder's context will be.

    prompt (zero-shot chat: system, numbered input, instruction)   labels -100
    <copy lines="1-22"/>                                            labelled (the model writes tags)
    ...the copied lines 1-22...                                     -100 (they enter by one prefill)
    <gen>    return x
    </gen>\\n                                                        labelled
    <copy lines="24-40"/>...copied...                               tag labelled, text -100
    <|im_end|>                                                      labelled (the model ends the program)

The answer text is tokenised whole, as the decoder's boundary join leaves the cache; a token is
labelled when any of its characters belongs to a tag or to generated text.

A labelled token is also marked `changed` when it writes text that differs from the input lines its
gen replaces (the span between the gen's common prefix and common suffix with those lines; a pure
insertion is changed throughout). Those few tokens carry the edit: the shipped model's most frequent
failure writes the line a gen stands in for unchanged, so the trainer can weight them
(`changed_weight`). The `<gen>` opening is not marked: weighting it and not the `<copy` it competes
with taught a run to open programs with a gen (training card, run 7).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from backend.core.program import GEN_CLOSE, GEN_OPEN, CopyLines, Gen, parse_program, tag_text
from backend.core.resolve import resolve_program
from backend.runtime.prompt import chat_ids, program_messages

IGNORE = -100


@dataclass(frozen=True)
class Example:
    case_id: str
    kind: str
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    changed: tuple[bool, ...] = ()   # per position: a labelled token that writes new text (see above)
    prefix_key: str = ""             # the same for examples sharing a prompt prefix (one source, one style)

    @property
    def program_tokens(self) -> int:
        return sum(label != IGNORE for label in self.labels)


def answer_segments(program: str, source: str) -> list[tuple[str, bool, list[bool]]]:
    """The assistant turn as (text, labelled, changed per character) segments: tags and gens
    labelled, copied text not; in a gen, the characters that differ from the lines it replaces."""
    ops = parse_program(program)
    lines = source.splitlines(keepends=True)
    segments: list[tuple[str, bool, list[bool]]] = []
    next_line = 1  # the first input line not yet copied
    for index, op in enumerate(ops):
        if isinstance(op, Gen):
            replaced = "".join(lines[next_line - 1:_next_copy_start(ops, index, len(lines)) - 1])
            flags = [False] * len(GEN_OPEN) + changed_chars(op.text, replaced) + [False] * (len(GEN_CLOSE) + 1)
            segments.append((f"{GEN_OPEN}{op.text}{GEN_CLOSE}\n", True, flags))
        elif isinstance(op, CopyLines):
            tag = tag_text(op)[0]
            segments.append((tag, True, [False] * len(tag)))
            copied = resolve_program([op], source)
            segments.append((copied, False, [False] * len(copied)))
            next_line = op.end + 1
        else:
            raise ValueError(f"training programs copy whole lines only, got {op!r}")
    return segments


def _next_copy_start(ops: list[Any], index: int, line_count: int) -> int:
    """The first line of the next copy after ops[index], or one past the input's end."""
    return next((op.start for op in ops[index + 1:] if isinstance(op, CopyLines)), line_count + 1)


def changed_chars(written: str, replaced: str) -> list[bool]:
    """Per character of `written`: outside its common prefix and suffix with `replaced`."""
    prefix = 0
    while prefix < min(len(written), len(replaced)) and written[prefix] == replaced[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < min(len(written), len(replaced)) - prefix
           and written[-1 - suffix] == replaced[-1 - suffix]):
        suffix += 1
    return [prefix <= i < len(written) - suffix for i in range(len(written))]


def encode_example(tokenizer: Any, record: dict[str, Any], *, eos_id: int, style: str = "zero-shot") -> Example:
    """Ids and labels of one case record (fields source, instruction, program, id, kind)."""
    prompt = chat_ids(tokenizer, program_messages(record["source"], record.get("instruction"), style=style))
    segments = answer_segments(record["program"], record["source"])
    answer = "".join(text for text, _, _ in segments)
    labelled = [flag for text, is_labelled, _ in segments for flag in [is_labelled] * len(text)]
    changed = [flag for _, _, flags in segments for flag in flags]
    encoded = tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
    answer_ids = list(encoded["input_ids"])
    spans = list(encoded["offset_mapping"])
    answer_labels = [token if any(labelled[start:end]) or start == end else IGNORE
                     for token, (start, end) in zip(answer_ids, spans)]
    answer_changed = [any(changed[start:end]) for start, end in spans]
    return Example(
        case_id=str(record.get("id")),
        kind=str(record.get("kind", "")),
        input_ids=tuple(prompt + answer_ids + [eos_id]),
        labels=tuple([IGNORE] * len(prompt) + answer_labels + [eos_id]),
        changed=tuple([False] * len(prompt) + answer_changed + [False]),
        prefix_key=hashlib.sha256(f"{style}\n{record['source']}".encode("utf-8")).hexdigest()[:16],
    )
