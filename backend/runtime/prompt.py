"""The prompts: copy-as-decode (the model writes a program) and plain (the model writes the text).

Both go through the model's chat template: a short system text, two few-shot examples, then the
task. SmolLM2 has an 8k context and decodes ~14 tok/s on 2 CPU cores, so every prompt token
counts: the copy-as-decode prompt is ~400 tokens before the input.

Context layout (DESIGN.md, "Context layout for copy-as-decode"): the copied text of a copy tag
enters the cache right after the tag's closing `"/>`. The few-shot answers are laid out exactly
as the context will be during decoding, so the model sees the pattern it will continue:

    <copy lines="1-2"/>def is_even(n):            <- tag, then the copied lines (not emitted)
        \"\"\"Return True when n is even.\"\"\"
    <gen>    return n % 2 == 0                  <- a gen is emitted token by token
    </gen>
    <copy lines="4-6"/>...

A copy tag carries no newline after it (the copied lines end with their own), a gen is followed
by one newline so the next tag starts a line. `context_program(ops)` renders a program in that
layout without the copied text (what the model emits, and what reference replay forces);
`context_text(ops, source)` renders it with the copied text (what the cache holds).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from backend.core.lines import number_lines, split_lines
from backend.core.locate import location_hint
from backend.core.program import GEN_CLOSE, GEN_OPEN, CopyLines, CopyTokens, Gen, Op, tag_text
from backend.core.resolve import resolve_program

DEFAULT_INSTRUCTION = "Apply the edit."

PROGRAM_SYSTEM = (
    "You edit text. The input is shown with line numbers. Answer with a program made of two "
    "commands:\n"
    '<copy lines="i-j"/> copies input lines i to j unchanged; the copied lines appear right '
    "after the tag.\n"
    "<gen>text</gen> writes new text, without line numbers.\n"
    "Copy every line that stays the same; write only the changed lines with <gen>."
)

PLAIN_SYSTEM = (
    "You edit text. Answer with the complete edited text and nothing else: no line numbers, "
    "no explanation."
)

# Two small edits: a one-line fix inside copied code, and a line added and a line deleted.
_EXAMPLE_1_SOURCE = (
    "def is_even(n):\n"
    '    """Return True when n is even."""\n'
    "    return n % 2 == 1\n"
    "\n"
    "\n"
    "print(is_even(4))\n"
)
_EXAMPLE_1_INSTRUCTION = "Fix the bug in is_even."
_EXAMPLE_1_OPS: tuple[Op, ...] = (
    CopyLines(1, 2),
    Gen("    return n % 2 == 0\n"),
    CopyLines(4, 6),
)

_EXAMPLE_2_SOURCE = (
    "function total(items) {\n"
    "  let sum = 0;\n"
    "  console.log(items);\n"
    "  for (const item of items) {\n"
    "    sum += item.price;\n"
    "  }\n"
    "  return sum;\n"
    "}\n"
)
_EXAMPLE_2_INSTRUCTION = "Remove the logging and count the quantity of each item."
_EXAMPLE_2_OPS: tuple[Op, ...] = (
    CopyLines(1, 2),
    CopyLines(4, 4),
    Gen("    sum += item.price * item.quantity;\n"),
    CopyLines(6, 8),
)

EXAMPLES: tuple[tuple[str, str, tuple[Op, ...]], ...] = (
    (_EXAMPLE_1_SOURCE, _EXAMPLE_1_INSTRUCTION, _EXAMPLE_1_OPS),
    (_EXAMPLE_2_SOURCE, _EXAMPLE_2_INSTRUCTION, _EXAMPLE_2_OPS),
)


def context_program(ops: Sequence[Op]) -> str:
    """The program text in the decoding layout: copy tags bare, each gen followed by `"\\n"`.

    Parses back to `ops` (parse_program). Text holding `</gen>` must already be cut by
    `gen_ops`. Rejects anything that is not an Op (TypeError).
    """
    parts = []
    for op in ops:
        if isinstance(op, Gen):
            parts.append(f"{GEN_OPEN}{op.text}{GEN_CLOSE}\n")
        elif isinstance(op, (CopyLines, CopyTokens)):
            parts.append(tag_text(op)[0])
        else:
            raise TypeError(f"not a program op: {op!r}")
    return "".join(parts)


def context_text(ops: Sequence[Op], source: str) -> str:
    """The context as the cache holds it: `context_program(ops)` with each copy's text after its tag.

    Rejects (ResolveError) a copy past the end of `source`, and CopyTokens (the prompt only
    shows line copies).
    """
    parts = []
    for op in ops:
        if isinstance(op, Gen):
            parts.append(f"{GEN_OPEN}{op.text}{GEN_CLOSE}\n")
        elif isinstance(op, CopyLines):
            parts.append(tag_text(op)[0] + resolve_program([op], source))
        else:
            raise TypeError(f"context_text shows line copies and gens only, got {op!r}")
    return "".join(parts)


def _program_user(source: str, instruction: str | None, *, instruction_first: bool = False,
                  located: bool = False) -> str:
    asked = f"Instruction: {instruction or DEFAULT_INSTRUCTION}"
    text = f"Input:\n{number_lines(source)}{asked}"
    if located and instruction:
        # the lines the instruction's names occur on: the first hop of finding where to edit
        hint = location_hint(instruction, split_lines(source))
        text = f"{text}\n{hint.rstrip()}" if hint else text
    # A causal model reads each numbered line once, before the answer: with the instruction also
    # ahead of the input, the lines are read knowing what to look for (where to edit); the copy
    # after the input keeps it next to the answer, as the zero-shot layout has it.
    return f"{asked}\n{text}" if instruction_first else text


def _plain_user(source: str, instruction: str | None) -> str:
    return f"Input:\n{source}\nInstruction: {instruction or DEFAULT_INSTRUCTION}"


PROMPT_STYLES = ("few-shot", "zero-shot", "instruction-first", "located")


def program_messages(source: str, instruction: str | None, *, style: str = "few-shot") -> list[dict[str, str]]:
    """Chat messages asking for a copy-as-decode program: the system text, the two worked examples
    ("few-shot", for untrained models) or none ("zero-shot", for a model trained on the format:
    ~330 fewer prompt tokens per edit), then the numbered input and the instruction.
    "instruction-first" is zero-shot with the instruction also before the numbered input (a model
    trained on it). "located" is zero-shot with a row per term of the instruction saying which
    input lines hold it (core/locate.py). Rejects an unknown style (ValueError)."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}: use one of {', '.join(PROMPT_STYLES)}")
    messages = [{"role": "system", "content": PROGRAM_SYSTEM}]
    for example_source, example_instruction, ops in EXAMPLES if style == "few-shot" else ():
        messages.append({"role": "user", "content": _program_user(example_source, example_instruction)})
        messages.append({"role": "assistant", "content": context_text(ops, example_source)})
    messages.append({"role": "user", "content": _program_user(source, instruction,
                                                              instruction_first=style == "instruction-first",
                                                              located=style == "located")})
    return messages


def plain_messages(source: str, instruction: str | None) -> list[dict[str, str]]:
    """Chat messages asking for the whole edited text (the baselines' prompt). Rejects nothing."""
    messages = [{"role": "system", "content": PLAIN_SYSTEM}]
    for example_source, example_instruction, ops in EXAMPLES:
        messages.append({"role": "user", "content": _plain_user(example_source, example_instruction)})
        messages.append({"role": "assistant", "content": resolve_program(list(ops), example_source)})
    messages.append({"role": "user", "content": _plain_user(source, instruction)})
    return messages


def chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of `messages` through the tokenizer's chat template, ready for the assistant turn.

    Only the template's own special tokens are special: `<|im_end|>` written inside a message (a
    source file may hold it) stays text, so an input cannot end its own turn. Each message is
    tokenised apart from the template text around it; in ChatML a message sits between a newline
    and a special token, so this equals tokenising the whole text (a test checks it).
    A tokenizer without a chat template (a shape-only model) gets ChatML, which is what the
    embedded SmolLM2 uses.
    """
    marked = [dict(m, content=f"\x00{i}\x00") for i, m in enumerate(messages)]
    text = _render(tokenizer, marked)
    parts = _MARK.split(text)
    if sorted(p for p in parts[1::2]) != sorted(str(i) for i in range(len(messages))):
        # a template that rewrites contents: tokenise the rendered text whole
        return _template_ids(tokenizer, _render(tokenizer, messages))
    ids: list[int] = []
    for index, part in enumerate(parts):
        if index % 2:
            content = messages[int(part)]["content"]
            if content:
                ids += list(tokenizer(content, add_special_tokens=False, split_special_tokens=True)["input_ids"])
        elif part:
            ids += _template_ids(tokenizer, part)
    return ids


_MARK = re.compile("\x00([0-9]+)\x00")


def _render(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n"


def _template_ids(tokenizer: Any, text: str) -> list[int]:
    # transformers 5 returns a BatchEncoding from apply_chat_template(tokenize=True); tokenising
    # the rendered text ourselves gives a plain list on every version.
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def program_prompt_ids(tokenizer: Any, source: str, instruction: str | None, *, style: str = "few-shot") -> list[int]:
    """The copy-as-decode prompt as token ids (system, few-shot examples unless `style` is
    "zero-shot", numbered input, instruction)."""
    return chat_ids(tokenizer, program_messages(source, instruction, style=style))


def prompt_style(loaded: Any) -> str:
    """The prompt style a loaded model was trained for (its models.yaml `prompt`; few-shot by default)."""
    return getattr(getattr(loaded, "spec", None), "prompt", None) or "few-shot"


def plain_prompt_ids(tokenizer: Any, source: str, instruction: str | None) -> list[int]:
    """The plain-decoding prompt as token ids (same task; the answer is the whole edited text)."""
    return chat_ids(tokenizer, plain_messages(source, instruction))


def reference_program(ops: Sequence[Op]) -> str:
    """The program text reference replay forces: `ops` (an oracle program) in the decoding layout,
    so replay spends exactly the tokens and forwards a model writing that program would."""
    return context_program(ops)
