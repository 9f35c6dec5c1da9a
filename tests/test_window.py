"""Inputs longer than the model's context, edited through a window (backend/core/window.py,
backend/runtime/windowed.py): which window, the instruction and program renumbered, and the engine
putting the window's edit back into the whole input, on the fake model and on a real tokenizer."""

import dataclasses
import threading

import pytest
import torch

from backend.core.addressed import line_references, shift_line_references
from backend.core.fsm import TokenFSM
from backend.core.lines import split_lines
from backend.core.program import CopyLines, Gen, parse_program
from backend.core.resolve import resolve_program
from backend.core.window import (
    SourceWindow, WindowError, best_window, choose_window, renumber_copies, required_lines, shape_kept, widen_program,
    relevance, window_instruction,
)
from backend.runtime import window_retry
from backend.runtime.engine import ContextFull, EditEngine, EditError, EditLimits
from backend.runtime.grammar import Grammar
from backend.runtime.prompt import context_text
from fake_model import VOCAB_SIZE, FakeModel, FakeSpec, byte_vocabulary

LINES = [f"value_{n} = {n}\n" for n in range(1, 301)]
LINES[199] = "special_total = 0\n"  # line 200
SOURCE = "".join(LINES)


# -- choosing the window ----------------------------------------------------------------------------


def test_the_window_centres_the_lines_holding_the_instruction_s_rare_terms():
    window = choose_window("Make special_total start at one.", LINES, [1] * 300, 50)
    assert window.end - window.start + 1 == 50 and window.start <= 200 <= window.end
    assert abs((window.start + window.end) / 2 - 200) <= 1


def test_lines_the_instruction_names_by_number_must_be_inside():
    window = choose_window("Delete lines 10-12 and make special_total start at one.", LINES, [1] * 300, 50)
    assert window.start <= 10 and 12 <= window.end and window.end - window.start + 1 == 50
    assert required_lines("Delete lines 10-12 and line 40.", LINES) == (10, 40)


def test_named_lines_too_far_apart_for_one_window_are_refused():
    with pytest.raises(WindowError, match="lines 3-290"):
        choose_window("Delete line 3. Then delete line 290.", LINES, [1] * 300, 50)


def test_a_line_over_the_budget_is_never_in_a_window():
    window = choose_window("x", ["a\n", "b\n", "c\n", "d\n"], [1, 100, 1, 1], 3)
    assert not window.start <= 2 <= window.end


def test_a_rename_s_every_line_is_required():
    lines = ["a = 1\n"] + ["pass\n"] * 98 + ["print(a)\n"]
    assert required_lines("Rename a to b", lines) == (1, 100)


# -- renumbering --------------------------------------------------------------------------------------


def test_line_references_move_with_the_window_outside_quoted_code():
    said = "Delete lines 204-206, then add `line 9` after line 210."
    assert line_references(said) == [(204, 206), (210, 210)]
    assert shift_line_references(said, 200) == "Delete lines 4-6, then add `line 9` after line 10."
    assert window_instruction(said, SourceWindow(201, 260, 300)) == shift_line_references(said, 200)
    assert window_instruction(None, SourceWindow(201, 260, 300)) is None


def test_copies_are_renumbered_and_gen_text_is_not():
    program = '<copy lines="1-2"/><gen>x = \'<copy lines="1-1"/>\'\n</gen>\n<copy lines="4-5"/><gen>y <copy lines="3-3"/>'
    assert renumber_copies(program, 10) == (
        '<copy lines="11-12"/><gen>x = \'<copy lines="1-1"/>\'\n</gen>\n<copy lines="14-15"/><gen>y <copy lines="3-3"/>')


def test_a_window_program_becomes_the_whole_input_s_program():
    window = SourceWindow(4, 6, 9)
    assert widen_program('<copy lines="1-3"/>', window, finished=True) == (
        '<copy lines="1-3"/><copy lines="4-6"/><copy lines="7-9"/>')
    assert widen_program('<copy lines="1-1"/><gen>x', window, finished=False) == '<copy lines="1-3"/><copy lines="4-4"/><gen>x'
    assert widen_program('<copy lines="1-3"/>', SourceWindow(1, 3, 3), finished=True) == '<copy lines="1-3"/>'


def test_the_window_s_shape_must_be_the_whole_input_s():
    window = SourceWindow(191, 220, 300)
    assert shape_kept("Delete line 200.", LINES, window, window_instruction("Delete line 200.", window))
    assert shape_kept("Make special_total one.", LINES, window, "Make special_total one.")
    assert not shape_kept("Delete line 200.", LINES, window, "Delete line 200.")  # not renumbered: line 200 is off the window


# -- the engine, on the fake model --------------------------------------------------------------------


def fake_engine(script: str = "", context: int = 2000, **options):
    engine = EditEngine(FakeModel(script, spec=FakeSpec(context_length=context)),
                        limits=EditLimits(max_source_chars=10**6, max_source_lines=10**6), **options)
    engine._grammar = Grammar(byte_vocabulary(), TokenFSM(byte_vocabulary()), VOCAB_SIZE, torch.device("cpu"))
    return engine


def window_of(instruction, **options):
    return fake_engine(**options).validate(SOURCE, instruction, max_new_tokens=200).window


def run(engine, instruction, **options):
    events = list(engine.run(SOURCE, instruction, max_new_tokens=200, **options))
    assert events[-1].kind == "done" and events[-1].result is not None
    return events[:-1], events[-1].result


def test_an_input_over_the_context_is_edited_through_a_window():
    instruction = "Make special_total start at one."
    window = window_of(instruction)
    assert window is not None and window.start < 200 < window.end < 300 and window.start > 1
    at = 200 - window.offset  # special_total's line in the window
    ops = [CopyLines(1, at - 1), Gen("special_total = 1\n"), CopyLines(at + 1, window.end - window.offset)]
    events, result = run(fake_engine(context_text(ops, window.split(LINES)[1])), instruction)
    assert result.output == SOURCE.replace("special_total = 0", "special_total = 1") and result.stop_reason == "eos"
    assert result.metrics.window == window.describe()
    assert resolve_program(parse_program(result.program), SOURCE) == result.output
    assert result.program.startswith(f'<copy lines="1-{window.start - 1}"/><copy lines="{window.start}-199"/>')
    assert "".join(e.text for e in events if e.kind in ("copy", "gen")) == result.output  # what streamed is the output
    assert any(f'lines="{window.start}-199"' in e.text for e in events if e.kind == "tag")  # tags streamed renumbered


def test_a_numbered_edit_in_a_window_keeps_its_shape():
    """"Delete line 250." is said to the model as the window's line; the scripted model copies the
    whole window and the shape guard drops the line."""
    window = window_of("Delete line 250.")
    assert window.start <= 250 <= window.end
    script = context_text([CopyLines(1, window.end - window.offset)], window.split(LINES)[1])
    _, result = run(fake_engine(script), "Delete line 250.")
    assert result.output == "".join(LINES[:249] + LINES[250:]) and result.metrics.shape_refused >= 1


def test_plain_decoding_rewrites_the_same_window():
    instruction = "Make special_total start at one."
    window = window_of(instruction)
    engine = fake_engine()
    for strategy, budget in (("ar", 200), ("pld", 1500), ("cad", 100)):  # the window depends on neither
        assert engine.validate(SOURCE, instruction, strategy=strategy, max_new_tokens=budget).window == window
    edited = window.split(LINES)[1].replace("special_total = 0", "special_total = 1")
    events = list(fake_engine(edited).run(SOURCE, instruction, strategy="ar", max_new_tokens=1500))
    result = events[-1].result
    assert result.output == SOURCE.replace("special_total = 0", "special_total = 1")
    assert result.metrics.window == window.describe()


def test_an_unfinished_window_edit_leaves_the_lines_after_it_out():
    window = window_of("Make special_total start at one.")
    script = context_text([CopyLines(1, 3), Gen("x" * 500)], window.split(LINES)[1])
    _, result = run(fake_engine(script), "Make special_total start at one.")
    assert result.partial and result.stop_reason == "max_tokens"
    assert result.output.startswith("".join(LINES[: window.start + 2])) and not result.output.endswith(LINES[-1])


def test_windows_off_or_reference_mode_refuse_as_before():
    with pytest.raises(ContextFull, match="context holds 2,000"):
        fake_engine(window_inputs=False).validate(SOURCE, "x", max_new_tokens=200)
    with pytest.raises(ContextFull):
        fake_engine().validate(SOURCE, "x", mode="reference", target=SOURCE)


def test_named_lines_that_no_window_holds_get_a_plain_error():
    with pytest.raises(EditError, match="no window of it can be edited: lines 3-290"):
        fake_engine().validate(SOURCE, "Delete line 3. Then delete line 290.", max_new_tokens=200)


# -- a real tokenizer and chat template ------------------------------------------------------------


def test_the_window_fits_a_real_model_s_context(tiny_model):
    small = dataclasses.replace(tiny_model, spec=dataclasses.replace(tiny_model.spec, context_length=1500))
    engine = EditEngine(small, limits=EditLimits(max_source_chars=10**6, max_source_lines=10**6))
    prepared = engine.validate(SOURCE, "Make special_total start at one.", max_new_tokens=64)
    assert prepared.window is not None and prepared.window.start <= 200 <= prepared.window.end
    assert len(prepared.prompt_ids) + 64 + len(engine.encode(prepared.window.split(LINES)[1])) <= 1500
    result = engine.run_to_result(SOURCE, "Make special_total start at one.", max_new_tokens=64)
    assert result.metrics.window == prepared.window.describe()
    lines = split_lines(result.output)
    assert lines[: prepared.window.start - 1] == LINES[: prepared.window.start - 1]  # the lines before, untouched


# -- a second try in a window the size the model was trained on (backend/runtime/window_retry.py) ------


class ScriptPerTry(EditEngine):
    """The fake engine writing the next of `scripts` on each decode (one per try); a script is a
    list of program items, written in the layout of the window it is decoded in."""

    def __init__(self, scripts, context=3000):
        super().__init__(FakeModel("", spec=FakeSpec(context_length=context)),
                         limits=EditLimits(max_source_chars=10**6, max_source_lines=10**6), reuse_prompt=False)
        self._grammar = Grammar(byte_vocabulary(), TokenFSM(byte_vocabulary()), VOCAB_SIZE, torch.device("cpu"))
        self.scripts = list(scripts)
        self.tries = 0

    def decode_prepared(self, prepared, cancel):
        script = context_text(self.scripts[self.tries], prepared.request.source)
        self.loaded = self.decoding = dataclasses.replace(self.loaded, script_text=script)
        self.tries += 1
        return super().decode_prepared(prepared, cancel)


RUNAWAY = [CopyLines(1, 2), Gen("x" * 500)]  # the token limit (200) ends the gen
EARLY_END = [CopyLines(1, 3)]  # then EOS: the decoder copies the rest of the window


@pytest.fixture
def small_cap(monkeypatch):
    """A cap below the fake engine's window (~40 lines at a 3,000-byte context), as 200 lines are
    below a real model's largest."""
    monkeypatch.setattr(window_retry, "TRAINED_WINDOW_LINES", 20)
    return 20


def test_a_runaway_in_a_large_window_is_tried_again_in_a_trained_size_window(small_cap):
    engine = ScriptPerTry([RUNAWAY, EARLY_END])
    first = engine.validate(SOURCE, "Make special_total start at one.", max_new_tokens=200).window
    events, result = run(engine, "Make special_total start at one.")
    assert engine.tries == 2 and first.end - first.start + 1 > small_cap
    restart = [index for index, event in enumerate(events) if event.kind == "restart"]
    assert len(restart) == 1 and f"in {first.describe()}" in events[restart[0]].text
    assert "reached the token limit" in events[restart[0]].text
    second = result.metrics.window
    assert second != first.describe() and not result.partial and result.stop_reason == "eos"
    start, end = (int(n) for n in second.split()[1].split("-"))
    assert end - start + 1 <= small_cap and start <= 200 <= end  # still around the instruction's line
    assert result.output == SOURCE and result.metrics.window_retry == events[restart[0]].text
    assert result.metrics.retry_seconds is not None and result.metrics.retry_seconds >= 0
    after = "".join(e.text for e in events[restart[0] + 1:] if e.kind in ("copy", "gen"))
    assert after == result.output  # what streamed after the restart is the whole output


def test_a_second_runaway_is_reported_as_the_failure_it_is(small_cap):
    engine = ScriptPerTry([RUNAWAY, RUNAWAY])
    events, result = run(engine, "Make special_total start at one.")
    assert engine.tries == 2 and [e.kind for e in events].count("restart") == 1
    assert result.partial and result.stop_reason == "max_tokens" and result.metrics.window_retry


def test_a_finished_or_cancelled_edit_is_never_tried_again(small_cap):
    engine = ScriptPerTry([EARLY_END, RUNAWAY])
    events, result = run(engine, "Make special_total start at one.")
    assert engine.tries == 1 and not result.partial and result.metrics.window_retry is None
    assert "restart" not in [e.kind for e in events]
    cancel = threading.Event()
    cancel.set()
    engine = ScriptPerTry([RUNAWAY, EARLY_END])
    _, result = run(engine, "Make special_total start at one.", cancel=cancel)
    assert engine.tries == 1 and result.stop_reason == "cancel"


def test_no_second_try_when_the_window_is_already_trained_size_or_the_lines_do_not_fit(small_cap, monkeypatch):
    engine = ScriptPerTry([RUNAWAY, EARLY_END])
    monkeypatch.setattr(window_retry, "TRAINED_WINDOW_LINES", 100)  # larger than the first window
    _, result = run(engine, "Make special_total start at one.")
    assert engine.tries == 1 and result.stop_reason == "max_tokens" and result.metrics.window_retry is None
    monkeypatch.setattr(window_retry, "TRAINED_WINDOW_LINES", 20)
    engine = ScriptPerTry([RUNAWAY, EARLY_END])
    _, result = run(engine, "Make special_total start at one, as line 180 and line 210 do.")  # no 20-line window holds both
    assert engine.tries == 1 and result.partial and result.metrics.window_retry is None


def test_a_line_cap_bounds_the_window_and_keeps_what_is_required():
    window = best_window(relevance("Make special_total start at one.", LINES), None, [1] * 300, 150, max_lines=40)
    assert window.end - window.start + 1 == 40 and window.start <= 200 <= window.end
    with pytest.raises(WindowError):
        best_window([0.0] * 300, (10, 60), [1] * 300, 150, max_lines=40)
