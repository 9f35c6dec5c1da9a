"""One-token repairs of a line (backend/core/repairs.py) and the shapes "Fix the bug on line N" gets
from them (backend/core/addressed.py)."""

from __future__ import annotations

from backend.core.addressed import requested_shape
from backend.core.line_shape import REWRITE
from backend.core.repairs import (
    CONDITION, NUMBER, OPERATOR, VARIABLE, line_tokens, looks_like_javascript, repair_options, requested_kinds,
    variable_names,
)

PYTHON = [
    "def count_below(values, limit):\n",
    "    total = 0\n",
    "    for value in values:\n",
    "        if value <= limit:  # strictly below < limit\n",
    "            total += 1\n",
    "    return total\n",
]


def test_operators_numbers_variables_and_conditions_are_repaired():
    line = "    if value < limit and ready:\n"
    options = repair_options(line, ["limit", "ready", "value"])
    assert "    if value <= limit and ready:\n" in options        # operator
    assert "    if value < limit or ready:\n" in options          # and -> or
    assert "    if limit < limit and ready:\n" in options         # variable
    assert "    if not value < limit and ready:\n" in options     # condition negated
    assert line not in options and len(options) == len(set(options))
    assert repair_options("    return total + 1\n", [], [NUMBER]) == ["    return total + 2\n", "    return total + 0\n"]
    assert repair_options("    if not done:\n", [], [CONDITION]) == ["    if done:\n"]


def test_strings_comments_and_attributes_are_left_alone():
    line = "    log('a < b', x.total)  # 1 + 1\n"
    options = repair_options(line, ["total", "x", "y"])
    assert all("'a < b'" in option and "# 1 + 1" in option for option in options)
    assert not any(".x" in option or ".y" in option for option in options)  # `total` after '.' is an attribute
    assert "    log('a < b', y.total)  # 1 + 1\n" in options


def test_bug_words_narrow_the_repairs():
    assert requested_kinds({"there", "is", "a", "wrong", "operator", "on"}) == (OPERATOR,)
    assert requested_kinds({"off", "by", "one", "error"}) == (NUMBER,)
    assert requested_kinds({"wrong", "variable"}) == (VARIABLE,)
    assert requested_kinds({"fix", "the", "bug"}) == (OPERATOR, NUMBER, VARIABLE, CONDITION)
    operators_only = repair_options("    x = y + 1\n", ["x", "y"], [OPERATOR])
    assert operators_only == ["    x = y - 1\n"]


def test_javascript_conditions_are_negated_with_a_bang():
    line = "  if (ready && done) { return count; }\n"
    options = repair_options(line, ["count", "done", "ready"], [CONDITION], javascript=True)
    assert options == ["  if (!ready && done) { return count; }\n", "  if (ready && !done) { return count; }\n",
                       "  if (ready && done) { return !count; }\n"]
    assert looks_like_javascript(["function f() {\n", "  return 1;\n", "}\n"])
    assert not looks_like_javascript(PYTHON)


def test_variable_names_are_the_ones_used_twice():
    assert variable_names(PYTHON) == ["limit", "total", "value", "values"]
    assert variable_names(["a.b = c\n", "b = c\n"]) == ["c"]  # b is an attribute somewhere
    assert [kind for kind, _, _ in line_tokens("x = 'a' # c\n") if kind != "other"] == ["name", "op", "string", "comment"]


def test_fix_the_bug_on_a_line_offers_that_line_repaired():
    shape = requested_shape("Fix the bug on line 4.", PYTHON)
    assert shape is not None and (REWRITE, 4) in shape.slots
    ((_, options),) = shape.texts
    texts = [option.text for option in options]
    assert "        if value < limit:  # strictly below < limit\n" in texts
    assert all(text != PYTHON[3] for text in texts)
    narrowed = requested_shape("There is a wrong operator on line 4; fix it.", PYTHON)
    ((_, operator_options),) = narrowed.texts
    assert {option.text for option in operator_options} < set(texts)
    assert all("value" in option.text and "limit:" in option.text for option in operator_options)


def test_a_line_with_nothing_to_repair_is_left_to_the_model():
    lines = ["x = compute()\n", "print('done')\n"]
    shape = requested_shape("Fix the bug on line 2.", lines)
    assert shape is not None and shape.texts == ()


def test_a_server_is_asked_for_one_of_the_repairs():
    """Through a server (no logits) the repairs become the gen's grammar (remote_shape.py)."""
    import re

    from backend.core.program import CopyLines
    from backend.runtime.remote_shape import next_step

    shape = requested_shape("Fix the bug on line 4.", PYTHON)
    step = next_step(shape, [CopyLines(1, 3)])
    ((_, options),) = shape.texts
    regex = step.grammars[0].regex
    assert all(re.fullmatch(regex, f"<gen>{option.text}</gen>") for option in options)
    assert not re.fullmatch(regex, f"<gen>{PYTHON[3]}</gen>")
    assert not re.fullmatch(regex, "<gen>        pass\n</gen>")


def test_floor_division_is_code_in_python_and_a_comment_starts_javascript():
    assert repair_options("    half = n // 2 + 1\n", [], [NUMBER]) == [
        "    half = n // 3 + 1\n", "    half = n // 1 + 1\n", "    half = n // 2 + 2\n", "    half = n // 2 + 0\n"]
    assert repair_options("  x = 1; // was 2\n", [], [NUMBER], javascript=True) == ["  x = 2; // was 2\n", "  x = 0; // was 2\n"]
    assert [kind for kind, _, _ in line_tokens("a /* b */ c\n", javascript=True) if kind != "other"] == ["name", "comment", "name"]
