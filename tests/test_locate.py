"""The location hint: which input lines hold the names an instruction mentions."""

import pytest

from backend.core.locate import (
    MAX_LINES, MAX_TERMS, instruction_terms, locate, location_hint, rename_lines, requested_rename, term_lines,
)

LINES = [
    "def total_price(items):\n",
    "    total = 0\n",
    "    for item in items:\n",
    "        total += item.price  # the total so far\n",
    "    subtotal = total\r\n",
    "    return subtotal\n",
]


def test_terms_are_quoted_spans_then_code_like_or_uncommon_words():
    assert instruction_terms("Rename `min_length` -> `min_length2`.") == ["min_length", "min_length2"]
    assert instruction_terms('Set "expert_dtype" on line 19 to "config" instead.') == ["expert_dtype", "config"]
    assert instruction_terms("Use the name error_value instead of error.") == ["error_value", "error"]
    assert instruction_terms("Rename the variable total to subtotal") == ["total", "subtotal"]
    # instruction words and common English locate nothing; repeats are listed once
    assert instruction_terms("Delete the function and the block below it") == []
    assert instruction_terms("`x1` and x1 again") == ["x1", "again"]   # "again" is kept: found in no input, it locates nothing
    # one-character terms are everywhere
    assert instruction_terms("Rename `k` to `k2` throughout.") == ["k2"]


def test_a_fenced_snippet_is_not_searched():
    instruction = "Update the code as shown:\n```\n# ... existing code ...\n    total_price = 1\n```\nkeep `total`"
    assert instruction_terms(instruction) == ["total", "shown", "keep"]
    assert instruction_terms("Apply:\n```\nunclosed_fence = 1\n") == ["Apply"]   # an unclosed fence runs to the end


def test_identifiers_match_whole_words_and_other_text_as_text():
    assert term_lines("total", LINES) == [2, 4, 5]       # not total_price (1), not subtotal (5, 6)
    assert term_lines("subtotal", LINES) == [5, 6]
    assert term_lines("total += item", LINES) == [4]
    assert term_lines("missing", LINES) == []


def test_locate_keeps_found_terms_with_few_lines_and_ignores_line_endings():
    assert locate("Rename total to grand_total", LINES) == [("total", [2, 4, 5])]
    assert locate("Remove `subtotal = total`", LINES) == [("subtotal = total", [5])]
    common = [f"x = {n}\n" for n in range(MAX_LINES + 1)]
    assert locate("Rename `x` to `y`", common) == []          # on every line: locates nothing
    many = "Rename " + " ".join(f"name{n}" for n in range(MAX_TERMS + 2))
    lines = [f"name{n} = 1\n" for n in range(MAX_TERMS + 2)]
    assert len(locate(many, lines)) == MAX_TERMS


def test_the_hint_has_one_row_per_term_and_is_empty_without_one():
    # quoted spans first, then bare words
    assert location_hint("Rename total and `items`", LINES) == (
        "Lines with `items`: 1, 3\nLines with `total`: 2, 4, 5\n")
    assert location_hint("Fix the bug", LINES) == ""


def test_only_the_first_candidates_are_searched():
    """A pasted 20,000-character instruction must not search the input thousands of times."""
    from backend.core.locate import MAX_CANDIDATES

    words = [f"word{n}" for n in range(MAX_CANDIDATES + 8)]
    lines = [f"{words[MAX_CANDIDATES - 1]} = 1\n", f"{words[MAX_CANDIDATES]} = 2\n"]
    assert locate(" ".join(words), lines) == [(words[MAX_CANDIDATES - 1], [1])]


@pytest.mark.parametrize("instruction, expected", [
    ("Rename `min_length` -> `min_length2`.", ("min_length", "min_length2")),
    ("Change the name `k` to `k2` throughout.", ("k", "k2")),
    ("Use the name error_value instead of error.", ("error", "error_value")),
    ("Rename the variable total to subtotal", ("total", "subtotal")),
    ("rename the function 'load' as \"load_all\"", ("load", "load_all")),
    ("Please rename $el to $elem everywhere", ("$el", "$elem")),
    ("Rename `variable` to `var2`.", ("variable", "var2")),
    ("Fix the bug.", None),
    ("Change 1 to 2 on line 12.", None),
    ("Rename x to x.", None),                                   # nothing to do: not a rename
    ("Rename the file to main.py", None),                       # "the file" names no identifier
    ("Update the code as shown:\n```\n# rename a to b\n```", None),  # a snippet's code is not read
    ("Please rename `a` to `b` everywhere in this file.", ("a", "b")),
    ("Rename a to b, then delete line 5.", None),               # more than a rename: no shape to keep
    ("Delete line 3. Then Rename `a` -> `b`.", None),
])
def test_requested_rename_reads_the_usual_wordings(instruction, expected):
    assert requested_rename(instruction) == expected


def test_rename_lines_are_the_lines_holding_the_old_name_as_a_word():
    assert rename_lines("Rename total to grand_total", LINES) == [2, 4, 5]
    assert rename_lines("Delete line 2.", LINES) == []
    assert rename_lines("Rename missing to found", LINES) == []
