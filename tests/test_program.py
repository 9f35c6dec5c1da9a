"""The program language: strict parser, renderer, gen splitting, op validation."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.core.program import (
    CopyLines,
    CopyTokens,
    Gen,
    ProgramError,
    gen_ops,
    merge_gens,
    parse_program,
    render_program,
    tag_text,
)

program__ops = [
    ("", []),
    ('<copy lines="1-1"/>', [CopyLines(1, 1)]),
    ('<copy lines="12-305"/>\n', [CopyLines(12, 305)]),
    ('<copy tokens="3-7"/>', [CopyTokens(3, 7)]),
    ("<gen></gen>", [Gen("")]),
    ("<gen>a\nb\r\n</gen>\n<gen>x</gen>", [Gen("a\nb\r\n"), Gen("x")]),
    ('<gen><copy lines="1-2"/></gen>', [Gen('<copy lines="1-2"/>')]),
    ("<gen><gen></gen>", [Gen("<gen>")]),
    ("<gen></</gen><gen>gen></gen>", [Gen("</"), Gen("gen>")]),
    (
        '<copy lines="1-2"/><gen>x\n</gen>\n<copy tokens="10-10"/>\n',
        [CopyLines(1, 2), Gen("x\n"), CopyTokens(10, 10)],
    ),
]


@pytest.mark.parametrize(("program", "ops"), program__ops)
def test_parse_program(program, ops):
    assert parse_program(program) == ops


program__position__reason = [
    ("<gen>abc", 0, "unclosed gen"),
    ('<copy lines="1-2"/><gen>x', 19, "unclosed gen"),
    ('<copy lines="-2"/>', 13, "missing start number"),
    ('<copy lines="1-"/>', 15, "missing end number"),
    ('<copy lines="a-2"/>', 13, "missing start number"),
    ('<copy lines="1 2"/>', 14, "expected '-'"),
    ('<copy lines="12"/>', 15, "expected '-'"),
    ('<copy lines="1-2">', 16, "expected '\"/>'"),
    ('<copy lines="1-2" />', 16, "expected '\"/>'"),
    ('<copy lines="01-2"/>', 13, "leading zero"),
    ('<copy lines="1-02"/>', 15, "leading zero"),
    ('<copy lines="0-2"/>', 13, "is 0"),
    ('<copy lines="1-0"/>', 15, "is 0"),
    ('<copy lines="5-3"/>', 0, "start > end"),
    ('<copy lines="٣-4"/>', 13, "missing start number"),  # Arabic-Indic digit: not an INT
    ('<copy lines="1-1234567890123456789"/>', 15, "too large"),
    ('<copy chars="1-2"/>', 6, "unknown copy attribute"),
    ("<copy/>", 0, "unknown tag"),
    ("<del>x</del>", 0, "unknown tag"),
    ("<Gen>x</Gen>", 0, "unknown tag"),
    ("hello", 0, "trailing junk"),
    ("<gen>x</gen>junk", 12, "trailing junk"),
    ("<gen>x</gen>\n\n", 13, "trailing junk"),
    ("\n<gen>x</gen>", 0, "trailing junk"),
    ("<gen>x</gen> ", 12, "trailing junk"),
]


@pytest.mark.parametrize(("program", "position", "reason"), program__position__reason)
def test_parse_program_rejects(program, position, reason):
    with pytest.raises(ProgramError) as caught:
        parse_program(program)
    assert caught.value.position == position
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"at char {position}: ")
    assert isinstance(caught.value, ValueError)


ops__rendered = [
    ([], ""),
    ([CopyLines(1, 3)], '<copy lines="1-3"/>\n'),
    ([CopyTokens(4, 4), Gen("a\r\n")], '<copy tokens="4-4"/>\n<gen>a\r\n</gen>\n'),
    ([Gen("")], "<gen></gen>\n"),
]


@pytest.mark.parametrize(("ops", "rendered"), ops__rendered)
def test_render_program(ops, rendered):
    assert render_program(ops) == rendered


op__tags = [
    (CopyLines(12, 305), ('<copy lines="12-305"/>',)),
    (CopyTokens(1, 2), ('<copy tokens="1-2"/>',)),
    (Gen("anything"), ("<gen>", "</gen>")),
]


@pytest.mark.parametrize(("op", "tags"), op__tags)
def test_tag_text(op, tags):
    assert tag_text(op) == tags


constructor__arguments = [
    (CopyLines, (0, 1)),
    (CopyLines, (2, 1)),
    (CopyLines, (-1, 3)),
    (CopyLines, (True, 1)),
    (CopyLines, (1.0, 2)),
    (CopyTokens, (0, 0)),
    (CopyTokens, (5, 4)),
    (Gen, ("a</gen>b",)),
    (Gen, (b"bytes",)),
]


@pytest.mark.parametrize(("constructor", "arguments"), constructor__arguments)
def test_ops_reject_invalid_fields(constructor, arguments):
    with pytest.raises(ValueError):
        constructor(*arguments)


text__gens = [
    ("", []),
    ("abc", [Gen("abc")]),
    ("</gen>", [Gen("</"), Gen("gen>")]),
    ("a</gen>b</gen>", [Gen("a</"), Gen("gen>b</"), Gen("gen>")]),
    ("</gen></gen>", [Gen("</"), Gen("gen></"), Gen("gen>")]),
]


@pytest.mark.parametrize(("text", "gens"), text__gens)
def test_gen_ops(text, gens):
    assert gen_ops(text) == gens


ops__merged = [
    ([Gen("a"), Gen("b")], [Gen("ab")]),
    ([Gen("</"), Gen("gen>")], [Gen("</"), Gen("gen>")]),
    ([Gen(""), CopyLines(1, 1), Gen(""), Gen("")], [CopyLines(1, 1)]),
    ([Gen("a"), CopyLines(1, 1), Gen("b"), Gen("c")], [Gen("a"), CopyLines(1, 1), Gen("bc")]),
]


@pytest.mark.parametrize(("ops", "merged"), ops__merged)
def test_merge_gens(ops, merged):
    assert merge_gens(ops) == merged


tricky_texts = st.lists(
    st.sampled_from(["</gen>", "<gen>", "</", "gen>", '<copy lines="1-2"/>', "\n", "\r\n", "\r"])
    | st.text(max_size=4),
    max_size=10,
).map("".join)
ranges = st.tuples(st.integers(1, 10**6), st.integers(0, 10**6)).map(lambda r: (r[0], r[0] + r[1]))
ops = st.one_of(
    ranges.map(lambda r: CopyLines(*r)),
    ranges.map(lambda r: CopyTokens(*r)),
    tricky_texts.filter(lambda text: "</gen>" not in text).map(Gen),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=8))
def test_parse_inverts_render(program):
    assert parse_program(render_program(program)) == program


@settings(max_examples=300, deadline=None)
@given(tricky_texts)
def test_every_text_is_representable(text):
    gens = gen_ops(text)
    assert "".join(gen.text for gen in gens) == text
    assert parse_program(render_program(gens)) == gens
    assert merge_gens(gens) == gens
