"""The no-op rule (backend/runtime/noop_guard.py): a model-written gen may not open with the line a
copy would give, nor a copy start right after the copy before it. Pure functions first, then the
decoder on the fake model (tests/fake_model.py)."""

import pytest
import torch

from backend.core.fsm import TokenFSM
from backend.core.program import CopyLines, Gen
from backend.runtime.decoder import decode_program
from backend.core.char_grammar import FIRST_LINE, IN_TAG, LAST_LINE
from backend.runtime.noop_guard import adjacent_start, chosen_first_line, completes_echo, echoed_line
from backend.runtime.grammar import Grammar
from backend.runtime.prompt import context_text, reference_program
from fake_model import VOCAB_SIZE, FakeModel, byte_vocabulary

SOURCE = "one\ntwo\nthree\nfour\n"
LINES = ["one\n", "two\n", "three\n", "four\n"]


@pytest.mark.parametrize("ops, expected", [
    ([], "one"),                                     # the program's start: line 1
    ([CopyLines(1, 1)], "two"),                      # after a copy: the line after it
    ([CopyLines(1, 1), CopyLines(3, 3)], "four"),    # the last copy counts, not the furthest
    ([CopyLines(1, 4)], None),                       # past the input's end
    ([CopyLines(1, 1), Gen("x\n")], None),           # after a gen: nothing to compare with
])
def test_echoed_line_is_the_line_after_the_last_copy(ops, expected):
    assert echoed_line(ops, LINES) == expected


def test_echoed_line_strips_crlf_as_the_model_sees_the_input():
    assert echoed_line([CopyLines(1, 1)], ["a\r\n", "b\r\n"]) == "b"


@pytest.mark.parametrize("body, token, expected", [
    (b"", b"two\n", True),             # one token writes the whole line
    (b"tw", b"o\n", True),             # the token that completes it
    (b"two", b"\n    x", True),        # the newline and more: the first line is what counts
    (b"two", b"s\n", False),           # a different line
    (b"tw", b"o", False),              # not complete yet
    (b"two\n", b"two\n", False),       # the first line is done: later lines are the model's edit
    (b"", b"\n", False),               # an empty first line is not "two"
])
def test_completes_echo_checks_the_first_line_only(body, token, expected):
    assert completes_echo(body, token, "two") is expected


def test_completes_echo_without_a_line_to_compare_never_refuses():
    assert completes_echo(b"", b"two\n", None) is False


def test_an_empty_line_is_an_echo_of_an_empty_input_line():
    assert completes_echo(b"", b"\n", "") is True


@pytest.mark.parametrize("ops, expected", [
    ([], None), ([CopyLines(1, 3)], 4), ([CopyLines(5, 6), CopyLines(1, 2)], 3), ([CopyLines(1, 1), Gen("x\n")], None),
])
def test_adjacent_start_is_the_line_after_a_closing_copy(ops, expected):
    assert adjacent_start(ops) == expected


@pytest.mark.parametrize("core, n_lines, expected", [
    ((FIRST_LINE, "6"), 156, None),          # 6 may still grow into 64
    ((FIRST_LINE, "64"), 156, 64),           # 640 > 156: the number is complete
    ((FIRST_LINE, "15"), 156, None),         # 150-156 fit
    ((FIRST_LINE, "15"), 15, 15),
    ((LAST_LINE, "", 64), 156, 64),          # after the '-'
    ((LAST_LINE, "7", 64), 156, 64),
    ((IN_TAG, '"/', 64, 70), 156, 64),       # closing the tag
    ((IN_TAG, "<copy", 0, 0), 156, None),    # still opening
    ((FIRST_LINE, ""), 156, None),
])
def test_chosen_first_line_once_it_can_no_longer_change(core, n_lines, expected):
    assert chosen_first_line(core, (), n_lines) == expected


def test_chosen_first_line_of_a_copy_the_token_completed():
    assert chosen_first_line(("between", True), (CopyLines(9, 12),), 20) == 9


@pytest.fixture(scope="module")
def grammar():
    vocabulary = byte_vocabulary()
    return Grammar(vocabulary, TokenFSM(vocabulary), VOCAB_SIZE, torch.device("cpu"))


def run(script_ops, grammar, **options):
    events = list(decode_program(FakeModel(context_text(script_ops, SOURCE)), SOURCE, "Edit.", grammar=grammar,
                                 max_new_tokens=60, **options))
    return events[-1].result


ECHO = [CopyLines(1, 1), Gen("two\n"), CopyLines(3, 4)]  # changes nothing: line 2 written out as it is


def test_without_the_rule_the_model_echoes_a_line(grammar):
    result = run(ECHO, grammar)
    assert result.output == SOURCE and result.metrics.noop_refused == 0


def test_the_rule_refuses_the_token_that_completes_the_echo(grammar):
    """The fake model's next choice after the refused '\\n' is byte 0 (its tie-break), so the gen goes
    on; what matters here: the echoed line never completes and the refusal is counted."""
    result = run(ECHO, grammar, avoid_noops=True)
    assert result.metrics.noop_refused >= 1
    assert result.program.startswith('<copy lines="1-1"/><gen>two') and "<gen>two\n" not in result.program
    assert not result.output.startswith("one\ntwo\n")


def test_a_gen_that_changes_its_first_line_is_left_alone(grammar):
    ops = [CopyLines(1, 1), Gen("TWO\n"), CopyLines(3, 4)]
    result = run(ops, grammar, avoid_noops=True)
    assert result.output == "one\nTWO\nthree\nfour\n" and result.metrics.noop_refused == 0


def test_a_reference_replay_is_never_refused(grammar):
    """A forced program is the program, echo or not."""
    result = run(ECHO, grammar, avoid_noops=True, force_program=reference_program(ECHO))
    assert result.output == SOURCE and result.metrics.noop_refused == 0 and result.stop_reason == "complete"


SPLIT = [CopyLines(1, 1), CopyLines(2, 4)]  # changes nothing: one copy cut in two


def test_the_rule_refuses_a_copy_that_starts_right_after_the_last_one(grammar):
    """The script's '2' is refused; the fake model's next choice is the lowest digit that fits,
    '1' (copy 1-...), so the program goes on without the split."""
    raw = run(SPLIT, grammar)
    assert raw.output == SOURCE and raw.metrics.noop_refused == 0
    result = run(SPLIT, grammar, avoid_noops=True)
    assert result.metrics.noop_refused >= 1
    assert '<copy lines="1-1"/><copy lines="2-' not in result.program


def test_a_copy_that_skips_a_line_is_left_alone(grammar):
    ops = [CopyLines(1, 1), CopyLines(3, 4)]
    result = run(ops, grammar, avoid_noops=True)
    assert result.output == "one\nthree\nfour\n" and result.metrics.noop_refused == 0


def test_a_remote_engine_refuses_the_rule_instead_of_ignoring_it():
    """A server chooses its own tokens, so asking for the rule there is an error, not a silent no-op."""
    from backend.runtime.runtimes import open_engine

    with pytest.raises(ValueError, match="in process only"):
        open_engine(None, engine_url="http://127.0.0.1:9", engine_kind="llamacpp", avoid_noops=True)
