"""The resolver: byte-exact output, clear errors naming the op and the range."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.core.lines import split_lines
from backend.core.program import CopyLines, CopyTokens, Gen, ProgramError
from backend.core.resolve import ResolveError, resolve_program, resolve_spans

SOURCE = "one\r\ntwo\nthree\rfour"
TOKENS = ["one", "\r\n", "two", "\n", "three", "\r", "four"]

program__resolved = [
    ("", ""),
    ('<copy lines="1-4"/>', SOURCE),
    ('<copy lines="2-2"/>\n<copy lines="2-2"/>', "two\ntwo\n"),
    ('<copy lines="4-4"/><copy lines="1-1"/>', "fourone\r\n"),
    ('<copy lines="3-3"/>\n<gen>\n</gen>', "three\r\n"),  # lone CR then a generated LF
    ('<gen>x</gen><copy tokens="5-5"/><copy tokens="1-1"/>', "xthreeone"),
    ([Gen("a"), CopyLines(2, 3), CopyTokens(7, 7)], "atwo\nthree\rfour"),
]


@pytest.mark.parametrize(("program", "resolved"), program__resolved)
def test_resolve_program(program, resolved):
    assert resolve_program(program, SOURCE, source_tokens=TOKENS) == resolved


program__source_tokens__message = [
    ('<copy lines="1-5"/>', TOKENS, "op 1: copy lines 1-5 but the input has 4 lines"),
    ('<gen>a</gen><copy lines="5-5"/>', TOKENS, "op 2: copy lines 5-5 but the input has 4 lines"),
    ('<copy tokens="1-8"/>', TOKENS, "op 1: copy tokens 1-8 but the input has 7 tokens"),
    ('<copy lines="1-1"/><copy tokens="1-1"/>', None, "op 2: copy tokens 1-1 but no source tokenization"),
    ('<copy lines="1-1"/>', ["one"], "source_tokens do not concatenate to the source"),
    ('<copy lines="1-1"/>', [*TOKENS, 7], "source token 8 is not a str"),
    ([CopyLines(1, 1), "<gen>x</gen>"], None, "op 2: not a program op"),
]


@pytest.mark.parametrize(("program", "source_tokens", "message"), program__source_tokens__message)
def test_resolve_program_rejects(program, source_tokens, message):
    with pytest.raises(ResolveError) as caught:
        resolve_program(program, SOURCE, source_tokens=source_tokens)
    assert str(caught.value).startswith(message)


program__spans = [
    ("", []),
    ('<copy lines="2-3"/>\n<gen>x\n</gen>', [("two\nthree\r", "copy"), ("x\n", "gen")]),
    ('<gen></gen><copy tokens="7-7"/><copy lines="1-1"/>', [("", "gen"), ("four", "copy"), ("one\r\n", "copy")]),
]


@pytest.mark.parametrize(("program", "spans"), program__spans)
def test_resolve_spans(program, spans):
    assert resolve_spans(program, SOURCE, source_tokens=TOKENS) == spans


@pytest.mark.parametrize(("program", "resolved"), program__resolved)
def test_resolve_spans_concatenate_to_the_resolved_text(program, resolved):
    spans = resolve_spans(program, SOURCE, source_tokens=TOKENS)
    assert "".join(text for text, _ in spans) == resolved
    assert {kind for _, kind in spans} <= {"copy", "gen"}


@pytest.mark.parametrize(("program", "source_tokens", "message"), program__source_tokens__message)
def test_resolve_spans_rejects_what_resolve_program_rejects(program, source_tokens, message):
    with pytest.raises(ResolveError) as caught:
        resolve_spans(program, SOURCE, source_tokens=source_tokens)
    assert str(caught.value).startswith(message)


def test_any_tokenization_that_concatenates_to_the_source_is_accepted():
    pieces = [*TOKENS[:-1], "fou", "r", ""]
    assert resolve_program('<copy tokens="7-8"/>', SOURCE, source_tokens=pieces) == "four"


def test_resolve_program_reports_malformed_text_as_program_error():
    with pytest.raises(ProgramError, match="unclosed gen"):
        resolve_program("<gen>x", SOURCE)


def test_empty_source_has_no_lines():
    with pytest.raises(ResolveError, match="the input has 0 lines"):
        resolve_program('<copy lines="1-1"/>', "")


sources = (
    st.lists(st.sampled_from(["a", "\n", "\r\n", "\r", "\u2028", "</gen>"]) | st.text(max_size=3), min_size=1)
    .map("".join)
    .filter(bool)
)


@settings(max_examples=200, deadline=None)
@given(sources, st.data())
def test_copy_lines_copies_exactly_those_lines(source, data):
    lines = split_lines(source)
    start = data.draw(st.integers(1, len(lines)))
    end = data.draw(st.integers(start, len(lines)))
    assert resolve_program([CopyLines(start, end)], source) == "".join(lines[start - 1:end])
    assert resolve_program([CopyLines(1, len(lines))], source) == source
