"""Copies move forward (backend/core/copy_order.py, backend/runtime/copy_order_guard.py): a
model-written copy may not go back over lines the program already copied. The pure check first,
then the decoder on the fake model (tests/fake_model.py), then a server's per-request grammar."""

import re

import pytest

from backend.core.char_grammar import BETWEEN, FIRST_LINE, IN_GEN, IN_TAG, LAST_LINE
from backend.core.copy_order import copy_floor, goes_back, goes_past_end, items_past_end
from backend.core.fsm import TokenFSM
from backend.core.program import CopyLines, Gen, parse_program
from backend.runtime.prompt import reference_program
from backend.runtime.remote import remote_program
from backend.runtime.remote_grammar import item_gbnf, item_regex
from fake_model import byte_vocabulary
from test_noop_guard import SOURCE, grammar, run  # noqa: F401 (grammar: a pytest fixture)
from test_remote_logic import FakeClient, count


@pytest.mark.parametrize("ops, n_lines, expected", [
    ([], 9, 1),
    ([Gen("x\n")], 9, 1),
    ([CopyLines(1, 2)], 9, 3),
    ([CopyLines(3, 7), Gen("x\n"), CopyLines(1, 2)], 9, 8),  # the furthest line, not the last copy's
    ([CopyLines(1, 9)], 9, 10),                               # past the last line: no copy at all
])
def test_copy_floor_is_one_past_the_furthest_line_copied(ops, n_lines, expected):
    assert copy_floor(ops, n_lines) == expected


def copied_to(line: int) -> list[CopyLines]:
    return [CopyLines(1, line)]


@pytest.mark.parametrize("core, before, n_lines, expected", [
    ((FIRST_LINE, "3"), copied_to(628), 680, True),     # 3, 3x, 3xx: none reaches 629 within 680 lines
    ((FIRST_LINE, "6"), copied_to(628), 680, False),    # 629..680 start with 6
    ((FIRST_LINE, "61"), copied_to(628), 680, True),    # 61x < 629
    ((FIRST_LINE, "1"), copied_to(11), 20, False),      # 12..19 start with 1
    ((FIRST_LINE, ""), copied_to(3), 4, False),         # no digit yet
    ((FIRST_LINE, "1"), copied_to(4), 4, True),         # past the last line every copy goes back
    ((FIRST_LINE, ""), copied_to(4), 4, True),          # ... before its first digit
    ((IN_TAG, "<c", 0, 0), copied_to(4), 4, True),      # ... as soon as the tag is a copy's
    ((IN_TAG, "<", 0, 0), copied_to(4), 4, False),      # '<' may still open a gen
    ((IN_TAG, "<g", 0, 0), copied_to(4), 4, False),
    ((LAST_LINE, "", 3), copied_to(3), 9, True),        # first line 3 read, floor 4
    ((LAST_LINE, "", 4), copied_to(3), 9, False),
    ((IN_TAG, '"', 2, 7), copied_to(3), 9, True),       # a finished number pair starting before the floor
    ((IN_TAG, "<c", 0, 0), copied_to(3), 9, False),     # a copy opened: its number decides
    ((IN_GEN, 0, True), copied_to(3), 9, False),        # a gen never goes back
    ((BETWEEN, True), copied_to(3), 9, False),          # EOS and gens stay allowed
])
def test_goes_back_once_the_first_line_cannot_reach_the_floor(core, before, n_lines, expected):
    assert goes_back(core, (), before, n_lines) is expected


def test_goes_back_checks_copies_the_token_completed_in_order():
    assert goes_back((BETWEEN, True), (CopyLines(2, 3),), copied_to(3), 9)
    assert not goes_back((BETWEEN, True), (CopyLines(4, 5),), copied_to(3), 9)
    # a token closing copy 4-5 and starting the next copy's first line: the floor moves to 6
    assert goes_back((LAST_LINE, "", 5), (CopyLines(4, 5),), copied_to(3), 9)
    assert not goes_back((LAST_LINE, "", 6), (CopyLines(4, 5),), copied_to(3), 9)


def test_every_prefix_of_a_forward_program_is_allowed_and_a_backward_one_is_caught():
    """Walk real programs token by token (the byte vocabulary: one character each) and ask the
    check at every step, as the decoder does."""
    fsm = TokenFSM(byte_vocabulary())

    def caught(program: str) -> bool:
        state, ops = fsm.start(4), []
        for byte in program.encode():
            step = fsm.advance(state, byte)
            if goes_back(step.state.core, step.completed, ops, 4):
                return True
            ops += step.completed
            state = step.state
        return False

    assert not caught('<copy lines="1-1"/><gen>TWO\n</gen>\n<copy lines="3-4"/>')
    assert not caught('<gen>zero\n</gen>\n<copy lines="1-4"/><gen>five\n</gen>\n')
    assert caught('<copy lines="1-3"/><gen>x\n</gen>\n<copy lines="2-4"/>')
    assert caught('<copy lines="1-4"/><gen>five\n</gen>\n<copy lines="4-4"/>')  # past the last line
    assert caught('<copy lines="1-3"/><copy lines="3-4"/>')


BACK = [CopyLines(1, 3), Gen("x\n"), CopyLines(2, 4)]  # lines 2-3 twice


def copies_after_first(program: str) -> list[CopyLines]:
    starts = re.findall(r'<copy lines="(\d+)-(\d+)"/>', program)
    return [CopyLines(int(a), int(b)) for a, b in starts][1:]


def test_without_the_rule_the_model_copies_lines_twice(grammar):
    result = run(BACK, grammar)
    assert result.output == "one\ntwo\nthree\nx\ntwo\nthree\nfour\n" and result.metrics.backward_refused == 0


def test_the_rule_refuses_the_digit_that_would_go_back(grammar):
    """The script's '2' is refused; the fake model's next choice is the lowest digit that still
    reaches line 4 ('4'), so the program copies on from there."""
    result = run(BACK, grammar, forward_copies=True)
    assert result.metrics.backward_refused >= 1
    assert result.output.startswith("one\ntwo\nthree\nx\n") and result.output.count("two") == 1
    assert all(op.start >= 4 for op in copies_after_first(result.program))


@pytest.mark.parametrize("ops, n_lines, expected", [
    ([CopyLines(1, 3)], 4, None),
    ([CopyLines(1, 4)], 4, 0),
    ([CopyLines(2, 4), Gen("x\n")], 4, 1),
    ([Gen("x\n"), CopyLines(4, 4), Gen("y\n"), CopyLines(1, 1)], 4, 2),  # from the first copy of line 4
])
def test_items_past_end_counts_from_the_last_line_s_first_copy(ops, n_lines, expected):
    assert items_past_end(ops, n_lines) == expected


@pytest.mark.parametrize("core, completed, before, expected", [
    ((IN_GEN, 0, False), (), copied_to(4), False),                   # the one gen past the end
    ((BETWEEN, True), (Gen("x\n"),), copied_to(4), False),           # ... closed
    ((IN_TAG, "<", 0, 0), (), [*copied_to(4), Gen("x\n")], True),    # then no item may open
    ((IN_TAG, "<", 0, 0), (Gen("x\n"),), copied_to(4), True),        # ... not even in the token closing it
    ((BETWEEN, False), (), [*copied_to(4), Gen("x\n")], False),      # the end (and its newline) stays
    ((IN_TAG, "<", 0, 0), (), [*copied_to(3), Gen("x\n")], False),   # line 4 not copied yet
])
def test_goes_past_end_once_a_gen_has_followed_the_last_line(core, completed, before, expected):
    assert goes_past_end(core, completed, before, 4) is expected


def test_past_the_last_line_a_copy_is_refused_and_after_one_gen_the_program_ends(grammar):
    """The script copies 1-4, writes a gen, then copies 1-4 again: the copy's '<' is refused once
    the gen has followed the last line, and the program ends there."""
    result = run([CopyLines(1, 4), Gen("five\n"), CopyLines(1, 4)], grammar, forward_copies=True)
    assert result.metrics.past_end_refused >= 1 and result.stop_reason == "eos"
    assert result.output == SOURCE + "five\n" and not result.partial


def test_past_the_last_line_a_second_gen_is_refused(grammar):
    result = run([CopyLines(1, 4), Gen("five\n"), Gen("six\n")], grammar, forward_copies=True)
    assert result.metrics.past_end_refused >= 1 and result.output == SOURCE + "five\n"
    without = run([CopyLines(1, 4), Gen("five\n"), Gen("six\n")], grammar)
    assert without.metrics.past_end_refused == 0 and without.output == SOURCE + "five\nsix\n"


def test_a_forward_program_is_left_alone(grammar):
    ops = [CopyLines(1, 1), Gen("TWO\n"), CopyLines(3, 4)]
    result = run(ops, grammar, forward_copies=True)
    assert result.output == "one\nTWO\nthree\nfour\n" and result.metrics.backward_refused == 0


def test_a_reference_replay_is_never_refused(grammar):
    """A forced program is the user's program: it may copy back."""
    result = run(BACK, grammar, forward_copies=True, force_program=reference_program(BACK))
    assert result.stop_reason == "complete" and result.metrics.backward_refused == 0
    assert result.output == "one\ntwo\nthree\nx\ntwo\nthree\nfour\n"


@pytest.mark.parametrize("text, accepted", [
    ('<copy lines="3-4"/>', True),
    ('<copy lines="2-4"/>', False),   # before the floor
    ('<copy lines="3-2"/>', False),   # the second number is bounded too
    ("<gen>x\n</gen>", True),
    ("", True),
])
def test_a_servers_item_grammar_starts_copies_at_the_floor(text, accepted):
    assert bool(re.fullmatch(item_regex(4, first_line=3), text)) == accepted


def test_a_grammar_with_no_line_left_allows_a_gen_or_the_end():
    """Past the input's last line (a floor past the input) a server may write a gen or end."""
    regex = item_regex(4, first_line=5)
    assert re.fullmatch(regex, "<gen>x\n</gen>") and re.fullmatch(regex, "")
    assert not re.fullmatch(regex, '<copy lines="4-4"/>')
    assert item_gbnf(4, first_line=5).startswith("root ::= gen?\n")
    assert 'num ::= "3" | "4"' in item_gbnf(4, first_line=3) or 'num ::= [3-4]' in item_gbnf(4, first_line=3)


def test_a_remote_program_asks_each_item_under_the_floor_of_the_copies_so_far():
    client = FakeClient([
        (['<copy lines="', '1-2'], "stop"),
        (["<gen>", "x\n"], "stop"),
        (['<copy lines="3-4'], "stop"),
        ([], "stop"),
    ])
    events = list(remote_program(client, SOURCE, "change", counter=count, max_new_tokens=100, forward_copies=True))
    result = events[-1].result
    assert parse_program(result.program) == parse_program('<copy lines="1-2"/><gen>x\n</gen>\n<copy lines="3-4"/>')
    regexes = [body["grammar"].regex for body in client.bodies]
    assert regexes[0] == item_regex(4) and regexes[1] == regexes[2] == item_regex(4, first_line=3)
    assert regexes[3] == item_regex(4, first_line=5)  # past the last line: a gen or the end


def test_a_remote_program_ends_once_a_gen_has_followed_the_last_line():
    client = FakeClient([
        (['<copy lines="1-4'], "stop"),
        (["<gen>", "five\n"], "stop"),
        (['<copy lines="1-4'], "stop"),  # never asked for
    ])
    events = list(remote_program(client, SOURCE, "change", counter=count, max_new_tokens=100, forward_copies=True))
    result = events[-1].result
    assert len(client.bodies) == 2 and result.stop_reason == "eos" and result.output == SOURCE + "five\n"
    assert client.bodies[1]["grammar"].regex == item_regex(4, first_line=5)


def test_the_gen_past_the_last_line_may_not_write_a_copy_tag(grammar):
    """Refused a copy past the end, the model opened a gen and wrote the copy tag in it as text
    (HumanEvalFix-JS/50): the tag's 'c' is refused there. Elsewhere a gen's text is its own."""
    result = run([CopyLines(1, 4), Gen('<copy lines="1-4"/>\n')], grammar, forward_copies=True)
    assert result.metrics.past_end_refused >= 1 and "<copy" not in result.output
    inside = run([CopyLines(1, 2), Gen('<copy lines="1-4"/>\n'), CopyLines(3, 4)], grammar, forward_copies=True)
    assert inside.metrics.past_end_refused == 0 and '<copy lines="1-4"/>\n' in inside.output
