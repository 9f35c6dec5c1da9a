"""The decoder's logic on a fake model (tests/fake_model.py): a byte tokenizer and a model that
writes a script, so every count is known and each test runs in milliseconds. The real-model tests
(test_decoder.py) stay the truth on real tokenizers and networks."""

import threading

import pytest
import torch

from backend.core.fsm import TokenFSM
from backend.core.lines import line_count
from backend.core.program import CopyLines, Gen
from backend.core.resolve import resolve_program
from backend.runtime.baselines import decode_plain, decode_prompt_lookup, run_to_result
from backend.runtime.decoder import decode_program
from backend.runtime.grammar import Grammar
from backend.runtime.handle import DecodeCache, ModelHandle
from backend.runtime.loop_guard import GEN_WINDOW, LoopGuard, gen_loop
from backend.runtime.prompt import context_program, context_text, reference_program
from fake_model import VOCAB_SIZE, FakeModel, byte_vocabulary

SOURCE = "one\ntwo\nthree\nfour\n"


@pytest.fixture(scope="module")
def grammar():
    vocabulary = byte_vocabulary()
    return Grammar(vocabulary, TokenFSM(vocabulary), VOCAB_SIZE, torch.device("cpu"))


def decode(model, grammar, source=SOURCE, **options):
    options.setdefault("max_new_tokens", 400)
    events = list(decode_program(model, source, "Edit.", grammar=grammar, **options))
    assert [e.kind for e in events].count("done") == 1 and events[-1].kind == "done"
    return events[:-1], events[-1].result


def test_the_fake_model_is_a_model_handle_with_a_decode_cache():
    model = FakeModel("x")
    assert isinstance(model, ModelHandle) and isinstance(model.new_cache(), DecodeCache)


def test_the_model_writes_its_script_exactly(grammar):
    ops = [CopyLines(1, 2), Gen("TWO\n"), CopyLines(4, 4)]
    events, result = decode(FakeModel(context_text(ops, SOURCE)), grammar, tag_drafts=False)
    assert result.stop_reason == "eos" and not result.partial and result.error is None
    assert result.program == context_program(ops)
    assert result.output == "one\ntwo\nTWO\nfour\n" == resolve_program(ops, SOURCE)
    spans: list[list[str]] = []
    for e in events:
        if e.kind != "tag" and spans and spans[-1][0] == e.kind == "gen":
            spans[-1][1] += e.text
        elif e.kind != "tag":
            spans.append([e.kind, e.text])
    assert spans == [["copy", "one\ntwo\n"], ["gen", "TWO\n"], ["copy", "four\n"]]
    m = result.metrics
    # Byte tokens: a copy enters as its bytes, and no join changes a tag's tokens.
    assert m.tokens_copied == len("one\ntwo\nfour\n") and m.boundary_retokenized == 0
    # '</gen' counts as gen as it is read, token by token: it could still turn out to be text.
    assert m.tokens_generated == len("TWO\n</gen")
    assert m.program_tokens == len(result.program.encode()) == m.tokens_tag + m.tokens_generated
    # What the model chose; the grammar forced the rest (jump-forward): 'opy lines="' after '<c',
    # '-' after a first line number that cannot grow (4 lines), '"/>' after a last one that cannot,
    # 'en>' after '<g', and '-4"/>' after a first line 4 of 4.
    chosen = ["<", "c", "1", "2", "<", "g", "T", "W", "O", "\n", "<", "/", "g", "e", "n", ">", "\n", "<", "c", "4"]
    assert m.jump_forward_tokens == m.program_tokens - len(chosen)
    # One forward per chosen token (the first choice comes from the prefill, and EOS from the last
    # forward's logits).
    assert m.forwards == len(chosen) and m.tag_drafts_accepted == 0
    assert m.copies == 2 and m.prompt_tokens > 0


def test_tag_drafts_save_the_openings_steps_and_change_nothing_else(grammar):
    ops = [CopyLines(1, 2), Gen("TWO\n"), CopyLines(4, 4)]
    _, plain = decode(FakeModel(context_text(ops, SOURCE)), grammar, tag_drafts=False)
    events, drafted = decode(FakeModel(context_text(ops, SOURCE)), grammar)
    assert (drafted.program, drafted.output, drafted.stop_reason) == (plain.program, plain.output, "eos")
    assert "".join(e.text for e in events if e.kind == "copy") == "one\ntwo\nfour\n"
    # After the copy, '<gen>' rides on the copy's forward ('<' and 'g' were choices: 2 steps
    # saved, 'en>' forced); after the gen, '\n<copy lines="4-' on the close's forward ('\n', '<',
    # 'c': 3 saved; the gen wrote 1 line after a copy to line 2, so line 3 was most likely
    # replaced and 4 is drafted: accepted, but what it forces ('-4"/>' and the copy) still needs
    # a forward, so it saves none). After the last copy the model ends: '<gen>' is rolled back.
    assert drafted.metrics.tag_drafts_accepted == 5
    assert drafted.metrics.forwards == plain.metrics.forwards - 5
    assert drafted.metrics.program_tokens == plain.metrics.program_tokens


def test_the_next_copy_is_predicted_after_the_lines_a_gen_replaced():
    from backend.runtime.hybrid import next_copy_start

    assert next_copy_start([CopyLines(1, 2), Gen("TWO\n")], 4) == 4
    assert next_copy_start([Gen("a\nb\n")], 9) == 3  # no copy before: from line 1
    assert next_copy_start([CopyLines(1, 3), Gen("x\n")], 4) is None  # past the input: the end
    assert next_copy_start([CopyLines(1, 3)], 9) is None  # after a copy a gen is drafted instead


def test_a_wrong_line_draft_takes_the_models_own_line(grammar):
    # The gen inserts a line (replaces none): the drafted '\n<copy lines="3-' is refused at the 3
    # (the model writes 2); the output is the model's, and the opening before it was still saved.
    ops = [CopyLines(1, 1), Gen("ONE AND A HALF\n"), CopyLines(2, 4)]
    _, plain = decode(FakeModel(context_text(ops, SOURCE)), grammar, tag_drafts=False)
    _, drafted = decode(FakeModel(context_text(ops, SOURCE)), grammar)
    assert drafted.output == plain.output == "one\nONE AND A HALF\ntwo\nthree\nfour\n"
    assert drafted.program == plain.program and drafted.stop_reason == "eos"
    assert drafted.metrics.tag_drafts_accepted == 2 + 3  # '<', 'g'; then '\n', '<', 'c'
    assert drafted.metrics.forwards == plain.metrics.forwards - 5


def test_a_rejected_tag_draft_takes_the_models_own_choice(grammar):
    # Copy then copy (a deleted line): the drafted '<gen>' after the first copy is refused at
    # 'g' (the model writes 'c'); the output is the model's, the rollback leaves a clean cache.
    ops = [CopyLines(1, 2), CopyLines(4, 4)]
    _, plain = decode(FakeModel(context_text(ops, SOURCE)), grammar, tag_drafts=False)
    _, drafted = decode(FakeModel(context_text(ops, SOURCE)), grammar)
    assert drafted.output == plain.output == "one\ntwo\nfour\n" and drafted.stop_reason == "eos"
    assert drafted.metrics.tag_drafts_accepted == 1  # only the '<'
    assert drafted.metrics.forwards == plain.metrics.forwards - 1


def test_the_grammar_overrules_the_model(grammar):
    # The script copies line 9 of a 4-line input: the mask never lets a line past 4 through.
    _, result = decode(FakeModel('<copy lines="3-9"/>x\n'), grammar, max_new_tokens=40)
    step = grammar.fsm.advance_text(grammar.fsm.start(line_count(SOURCE)), result.program)
    assert all(1 <= op.start <= op.end <= 4 for op in step.completed if isinstance(op, CopyLines))
    assert result.program.startswith('<copy lines="3-')


def test_a_repeated_copy_stops_early_with_a_plain_message(grammar):
    model = FakeModel('<copy lines="2-2"/>two\n', cyclic=True)
    events, result = decode(model, grammar, max_new_tokens=4000)
    assert result.stop_reason == "loop" and result.partial
    assert result.error == 'stopped: the model repeated <copy lines="2-2"/> 5 times'
    assert result.output == "two\n" * 5 and result.metrics.copies == 5
    assert result.metrics.program_tokens < 100  # stopped at the fifth copy, not at the token cap
    assert sum(e.kind == "copy" for e in events) == 5


def test_a_repeated_block_of_two_items_is_a_loop_too(grammar):
    ops = [CopyLines(1, 1), Gen("x\n")]
    _, result = decode(FakeModel(context_text(ops, SOURCE), cyclic=True), grammar, max_new_tokens=4000)
    assert result.stop_reason == "loop"
    assert result.error == 'stopped: the model repeated <copy lines="1-1"/><gen>x\\n</gen> 5 times'
    assert result.output == "one\nx\n" * 5


def test_a_gen_repeating_a_chunk_stops_early(grammar):
    model = FakeModel("<gen>x = 1\n" + "#   " * 300 + "</gen>\n")
    _, result = decode(model, grammar, max_new_tokens=4000)
    assert result.stop_reason == "loop" and result.partial
    assert result.error == ("stopped: the model repeated '#   ' inside a gen (80+ times in its last 320 characters)"
                            " (its text so far is kept)")
    assert result.output.startswith("x = 1\n#   #") and result.metrics.tokens_generated < 6 + GEN_WINDOW + 4


def test_a_long_line_of_one_character_is_not_a_loop(grammar):
    model = FakeModel("<gen># " + "=" * 400 + "\n</gen>\n")
    _, result = decode(model, grammar, max_new_tokens=4000)
    assert result.stop_reason == "eos" and result.output == "# " + "=" * 400 + "\n"


def test_four_repeats_are_not_a_loop(grammar):
    ops = [CopyLines(2, 2)] * 4 + [Gen("end\n")]
    _, result = decode(FakeModel(context_text(ops, SOURCE)), grammar)
    assert result.stop_reason == "eos" and result.output == "two\n" * 4 + "end\n"


def test_reference_mode_replays_repeats_without_stopping(grammar):
    ops = [CopyLines(2, 2)] * 6
    _, result = decode(FakeModel("unused"), grammar, max_new_tokens=None, force_program=reference_program(ops))
    assert result.stop_reason == "complete" and result.output == "two\n" * 6 and result.error is None


def test_max_new_tokens_keeps_the_open_gen_text(grammar):
    _, result = decode(FakeModel("<gen>abcdefghijklmnop\n</gen>\n"), grammar, max_new_tokens=10)
    assert result.stop_reason == "max_tokens" and result.partial
    assert result.program == "<gen>abcdefghij"[: len(result.program)] and result.metrics.program_tokens == 10
    assert result.output == "abcdefghij"[: result.metrics.tokens_generated]
    assert result.error == "incomplete program: stopped inside a gen (its text so far is kept)"


def test_cancel_before_the_first_token(grammar):
    cancel = threading.Event()
    cancel.set()
    _, result = decode(FakeModel("<gen>a</gen>"), grammar, cancel=cancel)
    assert result.stop_reason == "cancel" and result.partial and result.output == "" and result.metrics.forwards == 0


class CancelOnCall:
    """A cancel flag that turns on at its n-th `is_set()` call."""

    def __init__(self, n):
        self.calls, self.n = 0, n

    def is_set(self):
        self.calls += 1
        return self.calls >= self.n


def test_cancel_during_a_chunked_prefill(grammar):
    model = FakeModel("<gen>a</gen>")
    cancel = CancelOnCall(2)  # the first chunk goes in, the second is refused
    events = list(decode_program(model, SOURCE * 200, "Edit.", grammar=grammar, max_new_tokens=50, cancel=cancel))
    result = events[-1].result
    assert [e.kind for e in events] == ["done"]
    assert result.stop_reason == "cancel" and result.partial and result.output == "" and result.metrics.forwards == 0
    plain = run_to_result(decode_plain(model, [1] * 600, max_new_tokens=5, cancel=CancelOnCall(2)))
    assert plain.stop_reason == "cancel" and plain.output == "" and plain.metrics.forwards == 0


def test_without_a_cancel_flag_the_prompt_is_one_forward(grammar):
    model = FakeModel("<gen>a</gen>")
    events = list(decode_program(model, SOURCE * 200, "Edit.", grammar=grammar, max_new_tokens=50))
    assert events[-1].result.stop_reason == "eos"
    cache = model.new_cache()
    assert cache.prefill([1] * 600, chunk=600) is not None and cache.forwards == 1


def test_decode_steps_are_the_one_token_forwards(grammar):
    _, result = decode(FakeModel("<gen>abc</gen>"), grammar, tag_drafts=False)
    # Every chosen token goes in alone (no copy, no forced text after '<gen' ... '>', no tag drafts
    # after the close): the forwards
    # of one token are '<', 'a', 'b', 'c', '<', '/', 'g', 'e', 'n', '>' (after '<g', 'en>' is forced
    # and enters with 'g' in one forward of 4 tokens).
    assert result.metrics.decode_steps == result.metrics.forwards - 1
    assert result.metrics.decode_step_seconds > 0
    text = "alpha beta\n"
    model = FakeModel(text)
    plain = run_to_result(decode_plain(model, model.tokenizer.encode("<|im_start|>assistant\n"), max_new_tokens=100))
    assert plain.metrics.decode_steps == plain.metrics.forwards == len(text)


def test_an_empty_program_is_complete(grammar):
    _, result = decode(FakeModel(""), grammar)
    assert result.stop_reason == "eos" and result.program == "" and result.output == ""


def test_the_context_length_stops_the_run(grammar):
    model = FakeModel('<copy lines="1-4"/>one\ntwo\nthree\nfour\n<gen>z</gen>\n')
    prompt_tokens = decode(model, grammar)[1].metrics.prompt_tokens
    small = FakeModel(model.script_text, spec=type(model.spec)(context_length=prompt_tokens + 10))
    _, result = decode(small, grammar)
    assert result.stop_reason == "max_tokens" and result.partial
    assert result.error.startswith(f"the context is full ({prompt_tokens + 10} tokens)")


def test_plain_and_prompt_lookup_write_the_script_with_the_fake_model():
    text = "alpha beta gamma\n" * 3
    model = FakeModel(text)
    prompt = model.tokenizer.encode("<|im_start|>assistant\n")
    plain = run_to_result(decode_plain(model, prompt, max_new_tokens=200))
    pld = run_to_result(decode_prompt_lookup(model, prompt, max_new_tokens=200))
    assert plain.output == pld.output == text and plain.stop_reason == pld.stop_reason == "eos"
    assert plain.metrics.forwards == len(text.encode()) - 1 + 1  # one per token after the first, then EOS's
    assert pld.metrics.forwards < plain.metrics.forwards
    assert pld.metrics.forwards + pld.metrics.accepted_draft_tokens == plain.metrics.forwards


# -- the loop guard alone ----------------------------------------------------------------------

ops__stops_at = [
    ([CopyLines(3, 3)] * 6, 5),
    ([CopyLines(3, 3), CopyLines(4, 4)] * 5, 10),
    ([Gen("a"), CopyLines(1, 2), Gen("b")] * 5, 15),
    ([CopyLines(1, 1), CopyLines(2, 2), CopyLines(3, 3), CopyLines(4, 4)] * 5, None),  # period 4 > 3
    ([CopyLines(3, 3)] * 4 + [Gen("x")] + [CopyLines(3, 3)] * 4, None),
    ([CopyLines(i, i) for i in range(1, 30)], None),
]


@pytest.mark.parametrize("ops, stops_at", ops__stops_at)
def test_loop_guard(ops, stops_at):
    guard = LoopGuard()
    said = [guard.add(op) for op in ops]
    first = next((i + 1 for i, message in enumerate(said) if message), None)
    assert first == stops_at


text__repeats = [
    ("#   " * 90, "'#   '"),
    ("a\n" * 200, "'a\\n'"),
    ("x" + "ab" * 159, None),  # 319 characters: shorter than the window
    ("=" * 400, None),
    ("-=" * 200, "'-='"),
    ("def f(x):\n    return x\n" * 20, repr("def f(x):\n    return x\n")),  # a whole function, again and again
]


@pytest.mark.parametrize("text, repeats", text__repeats)
def test_gen_loop(text, repeats):
    message = gen_loop(text)
    if repeats is None:
        assert message is None
    else:
        assert message.startswith(f"stopped: the model repeated {repeats} inside a gen")


def test_loop_guard_shortens_a_long_gen():
    guard = LoopGuard(repeats=2)
    guard.add(Gen("y" * 100))
    assert guard.add(Gen("y" * 100)) == f"stopped: the model repeated <gen>{'y' * 40}…</gen> 2 times"
    with pytest.raises(ValueError):
        LoopGuard(repeats=1)


def test_an_early_end_after_a_copy_copies_the_rest_of_the_input(grammar):
    """backend/runtime/early_end.py: the model ends after `<copy lines="1-1"/><copy lines="3-3"/>`
    of a 4-line input (line 2 deleted, then it stopped): with copy_rest the decoder appends
    `<copy lines="4-4"/>`, the output keeps line 4, the metrics say which lines; without it the
    program is the model's own and line 4 is lost."""
    ops = [CopyLines(1, 1), CopyLines(3, 3)]
    _, raw = decode(FakeModel(context_text(ops, SOURCE)), grammar)
    assert raw.output == "one\nthree\n" and raw.metrics.copied_rest is None
    events, kept = decode(FakeModel(context_text(ops, SOURCE)), grammar, copy_rest=True)
    assert kept.stop_reason == "eos" and not kept.partial and kept.error is None
    assert kept.output == "one\nthree\nfour\n" and kept.metrics.copied_rest == "4-4"
    assert kept.program == raw.program + '<copy lines="4-4"/>' and kept.metrics.copies == 3
    assert "".join(e.text for e in events if e.kind == "copy").endswith("four\n")  # streamed like any copy


@pytest.mark.parametrize("ops", [
    [CopyLines(1, 2), CopyLines(4, 4)],           # a copy reached the last line
    [CopyLines(1, 3), Gen("FOUR\n")],              # ends with a gen: it may replace the tail
    [CopyLines(3, 4), CopyLines(1, 1)],            # the last line was copied, not last
])
def test_a_program_that_reaches_the_end_or_ends_with_a_gen_is_left_as_written(grammar, ops):
    _, result = decode(FakeModel(context_text(ops, SOURCE)), grammar, copy_rest=True)
    assert result.output == resolve_program(ops, SOURCE) and result.metrics.copied_rest is None


def test_a_reference_replay_never_copies_the_rest(grammar):
    """A forced program is the program: a deletion of the last line replays as written."""
    ops = [CopyLines(1, 3)]
    program = reference_program(ops)
    _, result = decode(FakeModel(context_text(ops, SOURCE)), grammar, force_program=program, copy_rest=True,
                       max_new_tokens=None)
    assert result.output == "one\ntwo\nthree\n" and result.metrics.copied_rest is None
