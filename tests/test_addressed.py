"""Reading line-addressed instructions into a program shape (backend/core/addressed.py)."""

import pytest

from backend.core.addressed import block_end, indentations, literal_options, rename_options, requested_shape, split_clauses
from backend.core.line_shape import INSERT, REWRITE, LineShape, LineText

LINES = [f"line{n} = {n}\n" for n in range(1, 31)]
LINES[9] = "    return value\n"
LINES[11] = "if ready:\n"
LINES[12] = "    go()\n"
LINES[13] = "\n"
LINES[14] = "    stop()\n"
LINES[15] = "done = True\n"
LINES[21] = "a[1] = fn(*a[0], 10, v1)\n"
LINES[18] = "c = 'g' + 'g'\n"
N = len(LINES)


def shape(rewrite=(), drop=(), insert_after=()):
    return LineShape.build(N, rewrite, drop, insert_after)


@pytest.mark.parametrize("instruction, expected", [
    ("Delete line 7.", shape(drop=(7,))),
    ("Remove line 10 (`return value`).", shape(drop=(10,))),
    ("Delete line 10: `return value`", shape(drop=(10,))),
    ("please remove lines 4 to 6", shape(drop=(4, 5, 6))),
    ("Delete lines 4-6.", shape(drop=(4, 5, 6))),
    ("Delete the statement `return value`.", shape(drop=(10,))),
    ("Remove the line `line3 = 3`.", shape(drop=(3,))),
    ("Remove the block starting at line 12 (`if ready:`).", shape(drop=(12, 13, 14, 15))),
    ("Add the comment `# hi` above line 11.", shape(insert_after=(10,))),
    ("Insert a comment before line 5: `# hi`", shape(insert_after=(4,))),
    ("Put `# hi` on a new line just before line 9.", shape(insert_after=(8,))),
    ("After line 3, add the line `pass`.", shape(insert_after=(3,))),
    ("Insert `assert x` after line 30.", shape(insert_after=(30,))),
    ("Add `import os` at the top.", shape(insert_after=(0,))),
    ("Add the import `import os` at the very top of the file.", shape(insert_after=(0,))),
    ("Start the file with `import json`.", shape(insert_after=(0,))),
    ("Insert `from pathlib import Path` as the first line.", shape(insert_after=(0,))),
    ("Replace line 4 with `x = 2`.", shape(rewrite=(4,))),
    ("Line 17 should read `y = 3`.", shape(rewrite=(17,))),
    ("Change line 1 to: `z = 0`", shape(rewrite=(1,))),
    ("Change 1 to 2 on line 22.", shape(rewrite=(22,))),
    ("In line 8 use True rather than False.", shape(rewrite=(8,))),
    ("Line 5: replace the value 0 with 1.", shape(rewrite=(5,))),
    ("Set 'g' on line 19 to 'h' instead.", shape(rewrite=(19,))),
    ("On line 20, change \"a\" to \"b\".", shape(rewrite=(20,))),
    ("Fix the bug on line 7.", shape(rewrite=(7,))),
    ("There is a off-by-one error on line 3; fix it.", shape(rewrite=(3,))),
    ("Line 11 has a bug: fix it.", shape(rewrite=(11,))),
    ("Rename line2 to second.", shape(rewrite=(2,))),
    ("Delete line 12. Then Add the comment `# hi` above line 23.", shape(drop=(12,), insert_after=(22,))),
    ("Make these changes:\n1. Change 1 to 2 on line 1.\n2. Remove line 17.\n3. Change line 23 to: `q`",
     shape(rewrite=(1, 23), drop=(17,))),
    ("Put `# hi` on a new line just before line 20.\nChange line 6 to: `x`", shape(rewrite=(6,), insert_after=(19,))),
])
def test_addressed_instructions_fix_their_shape(instruction, expected):
    assert requested_shape(instruction, LINES).slots == expected.slots


@pytest.mark.parametrize("instruction", [
    "Fix the bug.",                                       # no place named
    "Delete line 7 and tidy up the rest.",               # something more than the deletion
    "Delete line 31.",                                    # past the input
    "Remove line 10 (`return other`).",                  # the quoted line is not line 10
    "Delete the statement `nowhere()`.",                  # not in the input
    "Delete the statement `= 1`.",                        # not one whole line
    "Remove `helper` entirely.",                          # a named block: not read
    "Delete the function helper.",
    "Add a docstring to helper: Return the result.",
    "Replace lines 4-6 with `x`.",                        # a range rewritten: its line count is open
    "Delete line 3. Then Fix the bug.",                   # every clause must be addressed
    "Change line 3 to `x`, and then document everything.",
    "Delete line 4. Then Replace line 4 with `x`.",       # one line dropped and rewritten
    "Apply this:\n```python\nx = 1\n```\nDelete line 2.",  # an update snippet
    "Add `x` after line 3 before line 4.",               # two places for one insertion
    "Add `x` after line 3. Then Add `y` after line 3.",   # two lines for one insertion point
    "",
])
def test_anything_else_fixes_no_shape(instruction):
    assert requested_shape(instruction, LINES) is None


def test_no_shape_for_an_empty_input():
    assert requested_shape("Delete line 1.", []) is None


def test_clauses_split_on_numbering_lines_and_then():
    assert split_clauses("Make these changes:\n1. Delete line 2.\n2. Remove line 3.") == ["Delete line 2.", "Remove line 3."]
    assert split_clauses("Delete line 2. Then Remove line 3.") == ["Delete line 2.", "Remove line 3."]
    assert split_clauses("Delete line 2 and then remove line 3") == ["Delete line 2", "remove line 3"]


def test_quoted_code_is_not_read_for_line_numbers_or_words():
    assert requested_shape("Replace line 4 with `delete line 9 and more`.", LINES).slots == shape(rewrite=(4,)).slots


def test_block_end_follows_indentation_or_braces():
    assert block_end(["if x:\n", "    a\n", "\n", "    b\n", "\n", "c\n"], 1) == 4
    assert block_end(["f(\n", "    a,\n", ")\n", "g\n"], 1) == 3       # a closing bracket at the header's indent
    assert block_end(["if (a) {\n", "  b();\n", "}\n", "c();\n"], 1) == 3
    assert block_end(["x = 1\n", "y = 2\n"], 1) == 1                   # nothing below: the line alone


def test_a_quoted_line_is_the_text_of_its_gen_at_one_of_the_input_s_indentations():
    inserted = requested_shape("Add `pass` after line 12.", LINES)
    (position, (option,)), = inserted.texts
    assert inserted.slots[position - 1] == (INSERT, 12)
    assert option.text == "pass\n" and option.indents[0] == "    "       # line 13's indentation first
    assert set(option.indents) == {"    ", ""}
    replaced = requested_shape("Replace line 10 with `return other`.", LINES)
    assert replaced.texts == ((10, (LineText("return other\n", ("    ",)),)),)  # a replaced line keeps its indentation
    given = requested_shape("Line 10 should read `  return 0`.", LINES)
    assert given.texts == ((10, (LineText("  return 0\n"),)),)                   # ... unless the quote gives one


def test_a_literal_change_is_the_line_with_that_value_changed_once():
    shape = requested_shape("Change 1 to 2 on line 22.", LINES)
    assert shape.texts == ((22, (LineText("a[2] = fn(*a[0], 10, v1)\n"),)),)   # not the 1 of 10 or v1
    two = requested_shape("Set 'g' on line 19 to 'h' instead.", LINES)
    assert [o.text for o in two.line_texts(19)] == ["c = 'h' + 'g'\n", "c = 'g' + 'h'\n"]  # the model picks
    other_quotes = requested_shape('In line 19 use "h" rather than "g".', LINES)
    assert [o.text for o in other_quotes.line_texts(19)][0] == "c = 'h' + 'g'\n"
    absent = requested_shape("Change 7 to 8 on line 22.", LINES)
    assert absent.slots[21] == (REWRITE, 22) and absent.texts == ()          # any text: the model's


def test_literal_options_keep_the_line_ending_or_its_absence():
    assert literal_options("x = 0", "0", "1") == [LineText("x = 1")]
    assert literal_options("x = 0.5\n", "0", "1") == []                        # 0 is not the 0 of 0.5
    assert literal_options("f(`a`)\n", "`a`", "`b`") == [LineText("f(`b`)\n")]   # backticks only mark code


def test_indentations_are_ordered_by_use():
    assert indentations(["a\n", "    b\n", "    c\n", "\td\n", "\n"]) == ("    ", "", "\t")


def test_rename_options_rename_every_occurrence_first_and_none_last():
    texts = [o.text for o in rename_options("f(a, 'a', ab)\n", "a", "b")]
    assert texts[0] == "f(b, 'b', ab)\n" and texts[-1] == "f(a, 'a', ab)\n"
    assert sorted(texts[1:3]) == ["f(a, 'b', ab)\n", "f(b, 'a', ab)\n"]
    many = rename_options("a a a a a\n", "a", "b")
    assert [o.text for o in many] == ["b b b b b\n", "a a a a a\n"]


def test_a_rename_fixes_the_text_of_each_line_holding_the_name():
    shape = requested_shape("Rename line2 to second.", LINES)
    assert shape.line_texts(2)[0].text == "second = 2\n"


PY = ["import os\n", "\n", "@cache\n", "def load(path,\n", "         mode='r'):\n", "    with open(path) as f:\n",
      "        return f.read()\n", "\n", "def save(x):\n", "    pass\n"]
JS = ["const a = 1;\n", "function load(path) {\n", "  if (path) {\n", "    return 1;\n", "  }\n", "}\n", "load(a);\n"]


def test_deleting_a_named_definition_drops_its_decorators_signature_and_body():
    assert requested_shape("Delete the function load.", PY).slots == LineShape.build(10, drop=range(3, 8)).slots
    assert requested_shape("Remove `save` entirely.", PY).slots == LineShape.build(10, drop=(9, 10)).slots
    assert requested_shape("Remove the function load.", JS).slots == LineShape.build(7, drop=range(2, 7)).slots
    assert requested_shape("Delete the function missing.", PY) is None


def test_a_named_docstring_goes_after_the_signature_or_above_a_js_function():
    shape = requested_shape("Add a docstring to load: Read the file.", PY)
    (position, (option,)), = shape.texts
    assert shape.slots[position - 1] == (INSERT, 5)                      # after the signature's last line
    assert option == LineText('"""Read the file."""\n', ("    ",))
    js = requested_shape("Add the JSDoc comment /** Load it. */ above load.", JS)
    assert js.slots[js.texts[0][0] - 1] == (INSERT, 1) and js.texts[0][1] == (LineText("/** Load it. */\n", ("",)),)
    documented = PY[:5] + ['    """Read."""\n'] + PY[5:]
    assert requested_shape("Give `load` the doc comment: Read it.", documented) is None   # it has one


def test_a_clause_keeps_its_full_stop_when_split_at_then():
    shape = requested_shape("Add a docstring to save: Store it. Then Delete line 1.", PY)
    assert shape.texts[0][1][0].text == '"""Store it."""\n' and (("drop", 1) in shape.slots)
