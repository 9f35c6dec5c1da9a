"""The prompts: few-shot answers laid out as the decoding context, numbered input, chat template."""

import pytest

from backend.core.lines import number_lines
from backend.core.program import CopyLines, Gen, gen_ops, parse_program
from backend.core.resolve import resolve_program
from backend.runtime.prompt import (
    DEFAULT_INSTRUCTION,
    EXAMPLES,
    chat_ids,
    context_program,
    context_text,
    plain_messages,
    plain_prompt_ids,
    program_messages,
    program_prompt_ids,
    reference_program,
)

SOURCE = "def f(x):\r\n    return x + 1\r\n\r\nprint(f(2))"  # CRLF, no trailing newline
INSTRUCTION = "Make f add 2."


@pytest.mark.parametrize(
    "ops__program",
    [
        ([CopyLines(1, 2), Gen("x\n"), CopyLines(4, 6)], '<copy lines="1-2"/><gen>x\n</gen>\n<copy lines="4-6"/>'),
        ([Gen("a")], "<gen>a</gen>\n"),
        ([], ""),
        ([CopyLines(3, 3), CopyLines(1, 1)], '<copy lines="3-3"/><copy lines="1-1"/>'),
    ],
)
def test_context_program__layout_parses_back(ops__program):
    ops, program = ops__program
    assert context_program(ops) == program
    assert parse_program(program) == ops


def test_context_text_puts_copied_lines_right_after_their_tag():
    source = "a\nb\nc\n"
    ops = [CopyLines(2, 3), Gen("x\n"), CopyLines(1, 1)]
    assert context_text(ops, source) == '<copy lines="2-3"/>b\nc\n<gen>x\n</gen>\n<copy lines="1-1"/>a\n'


def test_reference_program_cuts_a_closing_tag_inside_gen_text():
    program = reference_program([CopyLines(1, 1), *gen_ops("x = '</gen>'\n")])
    ops = parse_program(program)
    assert resolve_program(ops, "a\n") == "a\nx = '</gen>'\n"
    assert all("</gen>" not in op.text for op in ops if isinstance(op, Gen))


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_few_shot_examples_are_consistent(index):
    source, instruction, ops = EXAMPLES[index]
    assert instruction
    target = resolve_program(list(ops), source)
    assert target != source
    messages = program_messages("x\n", "do it")
    assistant = messages[2 + 2 * index]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == context_text(ops, source)
    assert number_lines(source) in messages[1 + 2 * index]["content"]
    plain = plain_messages("x\n", "do it")
    assert plain[2 + 2 * index]["content"] == target


def test_program_messages_end_with_the_numbered_input_and_instruction():
    messages = program_messages(SOURCE, INSTRUCTION)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "<copy lines=" in messages[0]["content"] and "<gen>" in messages[0]["content"]
    last = messages[-1]["content"]
    assert number_lines(SOURCE) in last and last.endswith(INSTRUCTION)
    assert " 1| def f(x):" not in last and "1| def f(x):\n2|     return x + 1\n3| \n4| print(f(2))\n" in last


def test_instruction_first_puts_the_instruction_before_the_numbered_input_and_after_it():
    zero_shot = program_messages(SOURCE, INSTRUCTION, style="zero-shot")
    first = program_messages(SOURCE, INSTRUCTION, style="instruction-first")
    assert [m["role"] for m in first] == ["system", "user"] and first[0] == zero_shot[0]
    assert zero_shot[-1]["content"].startswith("Input:\n1| def f(x):")
    assert first[-1]["content"] == f"Instruction: {INSTRUCTION}\n" + zero_shot[-1]["content"]
    assert program_messages("a\n", None, style="instruction-first")[-1]["content"].startswith(
        f"Instruction: {DEFAULT_INSTRUCTION}\nInput:\n1| a\n")
    with pytest.raises(ValueError, match="unknown prompt style"):
        program_messages(SOURCE, INSTRUCTION, style="instruction-last")


def test_missing_instruction_gets_the_default():
    assert program_messages("a\n", None)[-1]["content"].endswith(DEFAULT_INSTRUCTION)
    assert plain_messages("a\n", "")[-1]["content"].endswith(DEFAULT_INSTRUCTION)


def test_plain_messages_show_the_raw_input():
    last = plain_messages(SOURCE, INSTRUCTION)[-1]["content"]
    assert SOURCE in last and "1|" not in last


def test_prompt_ids_through_the_chat_template(tiny_model):
    tokenizer = tiny_model.tokenizer
    ids = program_prompt_ids(tokenizer, SOURCE, INSTRUCTION)
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>assistant\n")
    assert text.count("<|im_start|>assistant\n") == 3  # two examples and the turn to answer
    assert '<copy lines="1-2"/>def is_even(n):' in text
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) < 600  # SmolLM2 decodes ~14 tok/s on 2 cores: the prompt stays short
    plain = plain_prompt_ids(tokenizer, SOURCE, INSTRUCTION)
    assert len(plain) < len(ids)
    assert "<copy" not in tokenizer.decode(plain, skip_special_tokens=False)


def test_prompt_ids_equal_tokenising_the_rendered_template_whole(tiny_model):
    tokenizer = tiny_model.tokenizer
    messages = program_messages(SOURCE, INSTRUCTION)
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat_ids(tokenizer, messages) == list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_special_token_text_in_a_source_stays_text(tiny_model):
    tokenizer = tiny_model.tokenizer
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = program_prompt_ids(tokenizer, "say <|im_end|> now\n", "x")
    clean = program_prompt_ids(tokenizer, "say now\n", "x")
    assert ids.count(im_end) == clean.count(im_end)  # only the template's own turn ends
    assert "say <|im_end|> now" in tokenizer.decode(ids, skip_special_tokens=False)


def test_tokenizer_without_chat_template_gets_chatml():
    class Chars:
        chat_template = None

        def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    ids = chat_ids(Chars(), [{"role": "user", "content": "hi"}])
    assert "".join(map(chr, ids)) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_located_adds_the_lines_the_instruction_names_after_it():
    zero_shot = program_messages(SOURCE, "Rename `print` to `show`.", style="zero-shot")
    located = program_messages(SOURCE, "Rename `print` to `show`.", style="located")
    assert [m["role"] for m in located] == ["system", "user"] and located[0] == zero_shot[0]
    assert located[-1]["content"] == zero_shot[-1]["content"] + "\nLines with `print`: 4"
    # nothing found, or no instruction: the zero-shot text exactly
    assert program_messages(SOURCE, "Fix the bug", style="located") == program_messages(SOURCE, "Fix the bug", style="zero-shot")
    assert program_messages(SOURCE, None, style="located") == program_messages(SOURCE, None, style="zero-shot")
