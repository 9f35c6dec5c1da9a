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
"""

from __future__ import annotations

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

    @property
    def program_tokens(self) -> int:
        return sum(label != IGNORE for label in self.labels)


def answer_segments(program: str, source: str) -> list[tuple[str, bool]]:
    """The assistant turn as (text, labelled) segments: tags and gens labelled, copied text not."""
    segments: list[tuple[str, bool]] = []
    for op in parse_program(program):
        if isinstance(op, Gen):
            segments.append((f"{GEN_OPEN}{op.text}{GEN_CLOSE}\n", True))
        elif isinstance(op, CopyLines):
            segments.append((tag_text(op)[0], True))
            segments.append((resolve_program([op], source), False))
        else:
            raise ValueError(f"training programs copy whole lines only, got {op!r}")
    return segments


def encode_example(tokenizer: Any, record: dict[str, Any], *, eos_id: int, style: str = "zero-shot") -> Example:
    """Ids and labels of one case record (fields source, instruction, program, id, kind)."""
    prompt = chat_ids(tokenizer, program_messages(record["source"], record.get("instruction"), style=style))
    segments = answer_segments(record["program"], record["source"])
    answer = "".join(text for text, _ in segments)
    labelled = _labelled_chars(segments)
    encoded = tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
    answer_ids = list(encoded["input_ids"])
    answer_labels = [
        token if any(labelled[start:end]) or start == end else IGNORE
        for token, (start, end) in zip(answer_ids, encoded["offset_mapping"])
    ]
    return Example(
        case_id=str(record.get("id")),
        kind=str(record.get("kind", "")),
        input_ids=tuple(prompt + answer_ids + [eos_id]),
        labels=tuple([IGNORE] * len(prompt) + answer_labels + [eos_id]),
    )


def _labelled_chars(segments: list[tuple[str, bool]]) -> list[bool]:
    flags: list[bool] = []
    for text, labelled in segments:
        flags.extend([labelled] * len(text))
    return flags
