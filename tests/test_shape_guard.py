"""The program shape an instruction fixes (backend/core/line_shape.py) and the decoder's guard that keeps
a model in it (backend/runtime/shape_guard.py). Pure functions first, then the decoder on the fake model
(tests/fake_model.py)."""

import pytest
import torch

from backend.core.char_grammar import BETWEEN, FIRST_LINE, IN_GEN, IN_TAG, LAST_LINE
from backend.core.fsm import TokenFSM
from backend.core.line_shape import INSERT, MAX_INSERTED_LINES, LineShape, LineText, gen_line_count
from backend.core.program import CopyLines, Gen
from backend.runtime.decoder import decode_program
from backend.runtime.grammar import Grammar
from backend.runtime.prompt import context_text, reference_program
from backend.runtime.shape_guard import program_shape
from fake_model import VOCAB_SIZE, FakeModel, byte_vocabulary

SOURCE = "a = 1\nb = a\nc = 2\nd = a + c\ne = 3\n"
RENAME = "Rename a to x"
RENAMED = "x = 1\nb = x\nc = 2\nd = x + c\ne = 3\n"
REWRITTEN = (1, 2, 4)  # the lines holding `a`
SHAPE = LineShape.build(5, rewrite=REWRITTEN)


def test_gen_line_count_counts_a_last_line_without_an_ending():
    assert [gen_line_count(t) for t in ("x\n", "x\ny\n", "x", "x\ny", "")] == [1, 2, 1, 2, 0]


def test_the_shape_of_the_renamed_program_is_covered_to_the_end():
    ops = [Gen("x = 1\nb = x\n"), CopyLines(3, 3), Gen("d = x + c\n"), CopyLines(4 + 1, 5)]
    assert SHAPE.covered(ops) == 6 and SHAPE.may_end(ops, None)


@pytest.mark.parametrize("ops", [
    [CopyLines(1, 1)],                              # a copy takes a kept-out line
    [Gen("x = 1\n"), CopyLines(3, 3)],              # line 2 skipped
    [Gen("x = 1\nb = x\nc = 2\n")],                 # a gen runs past the kept-out lines
    [Gen("x = 1\nb = x\n"), Gen("c = 2\n")],        # a gen on a free line
    [Gen("x = 1\nb = x")],                            # a line without its ending before a copy
])
def test_programs_out_of_shape_are_not_covered(ops):
    assert SHAPE.covered(ops) is None and not SHAPE.may_end(ops, None)


def test_a_copy_may_stop_short_of_the_next_kept_out_line_and_go_on():
    assert SHAPE.covered([Gen("x = 1\nb = x\n"), CopyLines(3, 3)]) == 4
    shape = LineShape.build(9, rewrite=(3,))
    assert shape.covered([CopyLines(1, 1), CopyLines(2, 2)]) == 3


@pytest.mark.parametrize("core, before, expected", [
    ((IN_TAG, "<", 0, 0), [], True),                                 # copy or gen: lines are left
    ((IN_TAG, "<c", 0, 0), [], False),                               # line 1 is kept out: no copy
    ((IN_TAG, "<g", 0, 0), [], True),                                # ... so a gen
    ((IN_TAG, "<g", 0, 0), [Gen("x = 1\nb = x\n")], False),          # line 3 is free: no gen
    ((FIRST_LINE, "3"), [Gen("x = 1\nb = x\n")], True),
    ((FIRST_LINE, "4"), [Gen("x = 1\nb = x\n")], False),             # a copy starts at the next line
    ((LAST_LINE, "3", 3), [Gen("x = 1\nb = x\n")], True),
    ((LAST_LINE, "4", 3), [Gen("x = 1\nb = x\n")], False),           # ... and stops before line 4
    ((IN_TAG, '"', 3, 3), [Gen("x = 1\nb = x\n")], True),
    ((IN_TAG, '"', 3, 4), [Gen("x = 1\nb = x\n")], False),
    ((IN_TAG, "<", 0, 0), [Gen("x = 1\nb = x\n"), CopyLines(3, 3), Gen("d = x + c\n"), CopyLines(5, 5)], False),
    ((BETWEEN, True), [CopyLines(1, 1)], False),                     # a completed op out of shape
])
def test_allows_judges_copy_and_gen_openings(core, before, expected):
    assert SHAPE.allows(core, "", before, []) is expected


def test_a_written_copy_runs_to_the_end_of_its_kept_run():
    shape = LineShape.build(9, rewrite=(5,))
    assert shape.allows((LAST_LINE, "4", 1), "", [], []) and shape.allows((IN_TAG, '"', 1, 4), "", [], [])
    assert not shape.allows((LAST_LINE, "3", 1), "", [], []) and not shape.allows((IN_TAG, '"', 1, 3), "", [], [])
    assert shape.covered([CopyLines(1, 2), CopyLines(3, 4)]) == 5   # split copies still read (a copied rest)


def test_an_open_gen_may_write_the_kept_out_run_and_nothing_after_its_last_line_end():
    gen = (IN_GEN, 0, True)
    assert SHAPE.allows(gen, "x = 1\nb = ", [], [])
    assert SHAPE.allows(gen, "x = 1\nb = x\n", [], [])
    assert not SHAPE.allows(gen, "x = 1\nb = x\nc", [], [])
    assert SHAPE.gen_is_full(1, "x = 1\nb = x\n") and not SHAPE.gen_is_full(1, "x = 1\n")


def test_a_run_of_kept_out_lines_may_be_written_by_several_gens():
    assert SHAPE.covered([Gen("x = 1\n"), Gen("b = x\n"), CopyLines(3, 3)]) == 4


def test_a_gen_may_leave_the_ending_off_the_input_s_last_line_only():
    shape = LineShape.build(2, rewrite=(2,))
    assert shape.may_end([CopyLines(1, 1), Gen("b = x")], None)
    assert LineShape.build(2, rewrite=(1,)).covered([Gen("x = 1")]) is None  # line 2 would join line 1


def test_the_program_may_end_only_with_the_input_covered():
    ops = [Gen("x = 1\nb = x\n"), CopyLines(3, 3), Gen("d = x + c\n"), CopyLines(5, 5)]
    assert SHAPE.may_end(ops, None)
    assert not SHAPE.may_end(ops[:3], None)                 # line 5 left out
    assert SHAPE.may_end(ops[:3], (5, 5))                   # ... unless the decoder copies the rest
    assert not SHAPE.may_end(ops[:2], (4, 5))               # a rest holding a kept-out line


def test_program_shape_is_none_unless_the_instruction_fixes_one():
    assert program_shape(SOURCE, RENAME).slots == SHAPE.slots
    assert program_shape(SOURCE, "Delete line 2.") == LineShape.build(5, drop=(2,))
    assert program_shape(SOURCE, "Rename zzz to y") is None
    assert program_shape(SOURCE, "Tidy up.") is None
    assert program_shape(SOURCE, None) is None


# -- the decoder, on the fake model --------------------------------------------------------------


@pytest.fixture(scope="module")
def grammar():
    vocabulary = byte_vocabulary()
    return Grammar(vocabulary, TokenFSM(vocabulary), VOCAB_SIZE, torch.device("cpu"))


def run(script_ops, grammar, instruction=RENAME, **options):
    events = list(decode_program(FakeModel(context_text(script_ops, SOURCE)), SOURCE, instruction, grammar=grammar,
                                 max_new_tokens=200, **options))
    return events[-1].result


def in_shape(result) -> bool:
    """The output keeps the rename's shape: as many lines, the lines without `a` unchanged."""
    out, src = result.output.splitlines(), SOURCE.splitlines()
    return len(out) == len(src) and all(o == s for n, (o, s) in enumerate(zip(out, src), 1) if n not in REWRITTEN)


RIGHT = [Gen("x = 1\nb = x\n"), CopyLines(3, 3), Gen("d = x + c\n"), CopyLines(5, 5)]


def test_a_program_already_in_shape_is_left_alone(grammar):
    result = run(RIGHT, grammar, guard_shapes=True)
    assert result.output == RENAMED and result.metrics.shape_refused == 0 and result.stop_reason == "eos"


@pytest.mark.parametrize("ops", [
    [CopyLines(1, 5)],                                              # copies the input unchanged
    [CopyLines(1, 1), Gen("b = x\n"), CopyLines(3, 5)],             # renames one line, copies the rest
    [Gen("x = 1\nb = x\nc = 2\nd = x + c\n"), CopyLines(5, 5)],     # one gen over a free line
    [CopyLines(2, 5)],                                              # drops line 1
])
def test_the_guard_keeps_any_program_in_the_shape(grammar, ops):
    raw = run(ops, grammar)
    assert raw.metrics.shape_refused == 0 and SHAPE.covered(_ops(raw)) is None  # out of shape unguarded
    result = run(ops, grammar, guard_shapes=True)
    assert result.metrics.shape_refused >= 1
    assert result.stop_reason == "eos" and in_shape(result), result.program
    assert SHAPE.covered(_ops(result)) == 6  # every copy on free lines, read front to back, to the end


def test_a_full_gen_is_closed_and_the_next_line_copied(grammar):
    """The script's gen runs on over free line 3; the guard closes it after line 2 and copy 3 follows,
    so line 3 comes out as it was, not as the model rewrote it."""
    ops = [Gen("x = 1\nb = x\nC = 2\n"), CopyLines(4, 5)]
    result = run(ops, grammar, guard_shapes=True)
    assert result.program.startswith('<gen>x = 1\nb = x\n</gen>') and '<copy lines="3-3"/>' in result.program
    assert in_shape(result) and result.output.startswith("x = 1\nb = x\nc = 2\n")


def test_no_guard_without_a_rename_or_in_a_reference_replay(grammar):
    unchanged = [CopyLines(1, 5)]
    assert run(unchanged, grammar, instruction="Tidy up.", guard_shapes=True).output == SOURCE
    forced = run(unchanged, grammar, guard_shapes=True, force_program=reference_program(unchanged))
    assert forced.output == SOURCE and forced.metrics.shape_refused == 0


def _ops(result):
    from backend.core.program import parse_program

    return parse_program(result.program)


# -- drops and insertions (line-addressed instructions) -------------------------------------------


def test_dropped_lines_are_skipped_and_never_copied():
    shape = LineShape.build(5, drop=(2, 3))
    assert shape.covered([CopyLines(1, 1), CopyLines(4, 5)]) == shape.end
    assert shape.may_end([CopyLines(1, 1), CopyLines(4, 5)], None)
    assert shape.covered([CopyLines(1, 2)]) is None          # a copy takes a dropped line
    assert shape.covered([CopyLines(1, 1), Gen("b = a\n")]) is None  # ... and no gen writes one
    assert shape.allows((FIRST_LINE, "4"), "", [CopyLines(1, 1)], []) and not shape.allows((FIRST_LINE, "2"), "", [CopyLines(1, 1)], [])


def test_dropping_the_last_lines_ends_without_the_rest():
    shape = LineShape.build(5, drop=(4, 5))
    assert shape.may_end([CopyLines(1, 3)], None)
    assert not shape.may_end([CopyLines(1, 3)], (4, 5))     # the decoder's copied rest would bring them back


def test_an_insertion_point_takes_one_gen_of_new_lines_between_copies():
    shape = LineShape.build(5, insert_after=(2,))
    right = [CopyLines(1, 2), Gen("# hi\n# there\n"), CopyLines(3, 5)]
    assert shape.may_end(right, None)
    assert shape.covered([CopyLines(1, 3)]) is None           # a copy runs past the point
    assert not shape.may_end([CopyLines(1, 2), CopyLines(3, 5)], None)  # nothing inserted
    assert shape.covered([CopyLines(1, 2), Gen("# hi\n"), Gen("# there\n")]) is None  # one gen fills it
    assert shape.allows((IN_TAG, "<g", 0, 0), "", [CopyLines(1, 2)], [])
    assert not shape.allows((IN_TAG, "<c", 0, 0), "", [CopyLines(1, 2)], [])
    assert shape.gen_is_full(3, "x\n" * MAX_INSERTED_LINES) and not shape.gen_is_full(3, "x\n")


def test_an_insertion_at_the_top_comes_before_line_1():
    shape = LineShape.build(2, insert_after=(0,))
    assert shape.may_end([Gen("import os\n"), CopyLines(1, 2)], None)
    assert shape.covered([CopyLines(1, 2)]) is None


def test_a_line_both_dropped_and_rewritten_or_out_of_range_is_refused():
    with pytest.raises(ValueError):
        LineShape.build(3, rewrite=(2,), drop=(2,))
    with pytest.raises(ValueError):
        LineShape.build(3, drop=(4,))
    with pytest.raises(ValueError):
        LineShape.build(3, insert_after=(4,))


@pytest.mark.parametrize("instruction, expected", [
    ("Delete line 2.", "a = 1\nc = 2\nd = a + c\ne = 3\n"),
    ("Remove lines 2-3.", "a = 1\nd = a + c\ne = 3\n"),
    ("Delete line 5.", "a = 1\nb = a\nc = 2\nd = a + c\n"),           # the copied rest does not bring it back
    ("Remove the line `c = 2`.", "a = 1\nb = a\nd = a + c\ne = 3\n"),
])
def test_the_guard_turns_a_program_that_copies_everything_into_the_deletion(grammar, instruction, expected):
    raw = run([CopyLines(1, 5)], grammar, instruction=instruction, copy_rest=True)
    assert raw.output == SOURCE                                        # the model alone changes nothing
    result = run([CopyLines(1, 5)], grammar, instruction=instruction, copy_rest=True, guard_shapes=True)
    assert result.output == expected and result.stop_reason == "eos" and result.metrics.shape_refused >= 1


def test_an_insertion_written_where_asked_is_left_alone(grammar):
    ops = [CopyLines(1, 2), Gen("# hi\n"), CopyLines(3, 5)]
    result = run(ops, grammar, instruction="Add `# hi` after line 2.", guard_shapes=True)
    assert result.output == "a = 1\nb = a\n# hi\nc = 2\nd = a + c\ne = 3\n" and result.metrics.shape_refused == 0


# -- quoted lines -----------------------------------------------------------------------------------


def test_a_gen_with_a_quoted_line_writes_that_line_at_one_of_its_indentations():
    shape = LineShape.build(3, insert_after=(1,), texts={(INSERT, 1): [LineText("pass\n", ("    ", ""))]})
    assert shape.gen_room(2) == 1
    gen = (IN_GEN, 0, True)
    before = [CopyLines(1, 1)]
    assert shape.allows(gen, "  ", before, []) and shape.allows(gen, "    pa", before, [])
    assert not shape.allows(gen, "    pass = 1", before, []) and not shape.allows(gen, "     ", before, [])
    assert shape.may_end([CopyLines(1, 1), Gen("pass\n"), CopyLines(2, 3)], None)
    assert shape.covered([CopyLines(1, 1), Gen("    pas\n")]) is None
    assert shape.text_to_write(2, "  ") == "  pass\n" and shape.text_to_write(2, "x") is None


def test_the_guard_writes_a_quoted_line_the_model_does_not(grammar):
    """The scripted model copies everything; asked for an insertion it is made to open a gen at line
    2's end, and (its own choices refused) the quoted line is written for it."""
    result = run([CopyLines(1, 5)], grammar, instruction="Add `# hi` after line 2.", guard_shapes=True)
    assert result.output == "a = 1\nb = a\n# hi\nc = 2\nd = a + c\ne = 3\n" and result.stop_reason == "eos"


def test_the_guard_makes_a_literal_change_exactly(grammar):
    result = run([CopyLines(1, 5)], grammar, instruction="Change 2 to 7 on line 3.", guard_shapes=True)
    assert result.output == "a = 1\nb = a\nc = 7\nd = a + c\ne = 3\n" and result.metrics.shape_refused >= 1


def test_a_rename_s_lines_are_the_held_lines_with_the_name_renamed(grammar):
    """The script renames a neighbour too and re-indents; each held line may only be itself with
    some of its `a`s renamed, the model's choice among them first."""
    ops = [Gen("x = 1\nb = x\n"), CopyLines(3, 3), Gen("d = x + x\n"), CopyLines(5, 5)]
    result = run(ops, grammar, guard_shapes=True)
    assert result.output == RENAMED and result.metrics.shape_refused >= 1


@pytest.mark.parametrize("flag", ["--no-shape-guard", "--no-rename-guard"])
def test_the_guard_s_flag_and_its_first_name_turn_it_off(flag):
    from backend.__main__ import build_parser

    args = build_parser().parse_args(["evaluate", "corpus.jsonl", flag])
    assert args.no_shape_guard is True
    assert build_parser().parse_args(["evaluate", "corpus.jsonl"]).no_shape_guard is False


def test_a_pending_close_is_allowed_only_where_the_gen_may_close_or_the_text_goes_on():
    """A trailing '<' (or '</ge') in a gen is text or the start of its close. Allowed while the line
    is not yet whole, it led the model into a gen it could neither close nor continue (dev/00108)."""
    shape = LineShape.build(3, rewrite=(2,), texts={("rewrite", 2): [LineText("f(a < b)\n")]})
    before = [CopyLines(1, 1)]
    assert not shape.allows((IN_GEN, 1, True), "f(a", before, [])      # 'f(a<' fits no line, and no close yet
    assert shape.allows((IN_GEN, 1, True), "f(a ", before, [])         # 'f(a <' goes on as text
    assert shape.allows((IN_GEN, 4, True), "f(a < b)\n", before, [])   # '</ge' after the whole line: the close
    assert not shape.allows((IN_GEN, 4, True), "f(a < b)", before, [])  # ... but not before its ending


def test_a_copy_completed_in_one_token_also_runs_to_its_run_s_end():
    """`"/>` can close a copy in the token that ends its number: the completed copy is judged too."""
    shape = LineShape.build(9, rewrite=(5,))
    assert not shape.allows((BETWEEN, True), "", [], [CopyLines(1, 3)])
    assert shape.allows((BETWEEN, True), "", [], [CopyLines(1, 4)])
