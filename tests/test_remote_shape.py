"""An instruction's shape through a remote engine (backend/runtime/remote_shape.py): copies written by
the client, gens asked under a grammar of the shape's lines. The scripted fake server of
tests/test_remote_logic.py; the real llama.cpp server runs in tests/test_remote_llamacpp.py."""

from __future__ import annotations

import re

from backend.core.addressed import requested_shape
from backend.core.lines import split_lines
from backend.core.line_shape import LineShape, LineText
from backend.core.program import parse_program
from backend.runtime.remote import remote_program
from backend.runtime.remote_shape import gen_grammar, line_choices, next_step
from test_remote_logic import SOURCE, FakeClient, count


def shaped_run(client: FakeClient, instruction: str):
    shape = requested_shape(instruction, split_lines(SOURCE))
    events = list(remote_program(client, SOURCE, instruction, counter=count, max_new_tokens=100, shape=shape))
    return events[-1].result


def test_a_deletion_asks_the_server_nothing():
    client = FakeClient([])
    result = shaped_run(client, "Delete line 2.")
    assert result.output == "a = 1\nc = 3\nd = 4\n" and result.stop_reason == "eos" and client.bodies == []
    assert parse_program(result.program) == parse_program('<copy lines="1-1"/><copy lines="3-4"/>')


def test_a_literal_change_asks_for_its_one_line_under_a_grammar_of_it():
    client = FakeClient([(["<gen>", "b = 7\n"], "stop")])
    result = shaped_run(client, "Change 2 to 7 on line 2.")
    assert result.output == "a = 1\nb = 7\nc = 3\nd = 4\n" and result.error is None
    (body,) = client.bodies
    assert body["prompt"].endswith('<copy lines="1-1"/>a = 1\n')        # the client wrote the copy before it
    assert body["grammar"].regex == "<gen>(?:b = 7\\n)</gen>" and '"b = 7\\n"' in body["grammar"].gbnf


def test_a_server_leaving_the_shape_is_an_error_not_a_wrong_edit():
    client = FakeClient([(["<gen>", "b = 8\n"], "stop")])               # a server that ignored the grammar
    result = shaped_run(client, "Change 2 to 7 on line 2.")
    assert result.stop_reason == "error" and "left the instruction's shape" in result.error


def test_next_step_copies_kept_runs_and_ends_when_every_slot_is_read():
    shape = LineShape.build(4, rewrite=(3,))
    assert next_step(shape, []).copy is not None and next_step(shape, []).copy.end == 2
    assert next_step(shape, parse_program('<copy lines="1-2"/>')).grammars is not None
    assert next_step(shape, parse_program('<copy lines="1-2"/><gen>x\n</gen><copy lines="4-4"/>')).end


def test_the_gen_grammar_allows_the_shape_s_lines_and_nothing_else():
    shape = LineShape.build(5, rewrite=(2, 3), texts={("rewrite", 2): [LineText("b\n", ("", "  "))]})
    choices = line_choices(shape, 2)
    assert choices == [("b\n", "  b\n"), None]
    pattern = re.compile(gen_grammar(choices).regex)
    assert pattern.fullmatch("<gen>b\n</gen>") and pattern.fullmatch("<gen>  b\nanything\n</gen>")
    assert not pattern.fullmatch("<gen>c\n</gen>") and not pattern.fullmatch("<gen>b\nx\ny\n</gen>")
    assert re.compile(gen_grammar(choices, after_lt=True).regex).fullmatch("gen>b\n</gen>")


def test_regex_and_gbnf_escape_what_they_must():
    grammar = gen_grammar([('x = "a\\\\b" + (c)*2\n',)])
    assert re.compile(grammar.regex).fullmatch('<gen>x = "a\\\\b" + (c)*2\n</gen>')
    assert '"x = \\"a\\\\\\\\b\\" + (c)*2\\n"' in grammar.gbnf


def test_a_file_over_the_server_s_context_is_edited_through_a_window():
    """As in process (tests/test_window.py): the window around line 250, the instruction renumbered
    for it; a deletion's copies are the client's own, so the scripted server is asked nothing."""
    from backend.runtime.remote_engine import RemoteEditEngine

    class SmallContext(RemoteEditEngine):
        context_length = 1024

    lines = [f"value_{n} = {n}\n" for n in range(1, 301)]
    source = "".join(lines)
    client = FakeClient([])
    engine = SmallContext(client, model="smollm2-135m")
    window = engine.validate(source, "Delete line 250.", max_new_tokens=64).window
    assert window is not None and window.start <= 250 <= window.end and window.start > 1
    result = engine.run_to_result(source, "Delete line 250.", max_new_tokens=64)
    assert result.output == "".join(lines[:249] + lines[250:]) and client.bodies == []
    assert result.metrics.window == window.describe()
    assert parse_program(result.program)[0] == parse_program(f'<copy lines="1-{window.start - 1}"/>')[0]
