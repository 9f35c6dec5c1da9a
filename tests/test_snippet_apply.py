"""The snippet aligner (backend/core/snippet_apply.py): merges that must be exact, and refusals
that must happen, because a wrong merge would lose lines silently."""

import inspect
import random
import textwrap

import pytest

from backend.core.snippet_apply import SnippetRefused, apply_update_snippet, find_update_snippet, split_parts

SOURCE = textwrap.dedent("""\
    import os


    class Box:
        def __init__(self, width, height):
            self.width = width
            self.height = height

        def area(self):
            return self.width * self.height

        def describe(self):
            return f"{self.width}x{self.height}"


    def main():
        box = Box(2, 3)
        print(box.area())
    """)


def snippet(body: str, lead: str = "Apply this update:") -> str:
    return f"{lead}\n```python\n{textwrap.dedent(body)}```"


def changed(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1
    return source.replace(old, new)


# (case, snippet body, expected merge as (old, new) replacements applied to SOURCE)
MERGES = [
    ("replace one line between context",
     """\
     # ... existing code ...
         def area(self):
             return self.width * self.height * 1
     # ... existing code ...
     """,
     [("self.width * self.height\n", "self.width * self.height * 1\n")]),
    ("insert lines after a context line",
     """\
     # ... existing code ...
         def area(self):
             # the box is flat
             return self.width * self.height
     # ... existing code ...
     """,
     [("    def area(self):\n", "    def area(self):\n        # the box is flat\n")]),
    ("delete a line between two context lines",
     """\
     # ... existing code ...
         def __init__(self, width, height):
             self.width = width

         def area(self):
     # ... existing code ...
     """,
     [("        self.height = height\n", "")]),
    ("two parts, each placed after the one before",
     """\
     import os
     import sys
     # ... existing code ...
         def describe(self):
             return f"{self.width} by {self.height}"
     # ... existing code ...
     """,
     [("import os\n", "import os\nimport sys\n"),
      ('f"{self.width}x{self.height}"', 'f"{self.width} by {self.height}"')]),
    ("no marker after: the part runs to the end of the input",
     """\
     // ... existing code ...
     def main():
         box = Box(4, 5)
         print(box.area())
     """,
     [("Box(2, 3)", "Box(4, 5)")]),
    ("a part whose only context is blank lines: placed by the line it rewrites",
     """\
     # ... existing code ...

         def describe(self):
             return f"{self.width}-by-{self.height}"

     # ... existing code ...
     """,
     [('f"{self.width}x{self.height}"', 'f"{self.width}-by-{self.height}"')]),
    ("other marker spellings: `# ...` and an ellipsis",
     """\
     # ...
         def area(self):
             return 0

         def describe(self):
     # \u2026 rest unchanged \u2026
     """,
     [("return self.width * self.height\n", "return 0\n")]),
]


@pytest.mark.parametrize("case, body, replacements", MERGES, ids=[m[0] for m in MERGES])
def test_case__snippet__merged(case, body, replacements):
    expected = SOURCE
    for old, new in replacements:
        expected = changed(expected, old, new)
    assert apply_update_snippet(SOURCE, snippet(body)) == expected


# (case, source, snippet body, the refusal's message contains)
REFUSALS = [
    ("no fenced snippet", SOURCE, None, "no fenced snippet"),
    ("a fence without a marker is not an update snippet", SOURCE, "def area(self):\n    return 1\n", "no fenced snippet"),
    ("only markers", SOURCE, "# ... existing code ...\n\n# ... existing code ...\n", "only markers"),
    ("context that occurs twice",
     "def a():\n    return 1\n\n\ndef b():\n    return 1\n",
     "# ... existing code ...\n    return 1\n    # done\n# ... existing code ...\n", "more than one place"),
    ("nothing matches and nothing is plainly rewritten", SOURCE,
     "# ... existing code ...\nfrobnicate(everything)\n# ... existing code ...\n", "no line that matches"),
    ("an unmarked start that would delete many lines", SOURCE,
     "def main():\n    box = Box(9, 9)\n# ... existing code ...\n", "no `... existing code ...` marker before"),
    ("an unmarked end that would delete many lines", SOURCE,
     "# ... existing code ...\nclass Box:\n    def __init__(self, width, height):\n        self.w = width\n", "marker after"),
    ("a snippet that changes nothing", SOURCE,
     "# ... existing code ...\n    def area(self):\n        return self.width * self.height\n# ... existing code ...\n",
     "changes nothing"),
    ("context the alignment cannot reach would be duplicated (more than 10 lines between)",
     "class Box:\n    def __init__(self):\n" + "".join(f"        self.v{i} = {i}\n" for i in range(30)) + "\n\ndef main():\n    pass\n",
     "# ... existing code ...\n    def __init__(self):\n        pass\n"
     "def main():\n# ... existing code ...\n", "could not be aligned"),
    ("a new edge line that may replace the line beside it or join it", SOURCE,
     "# ... existing code ...\n    def area(self):\n        return 0\n# ... existing code ...\n", "replace"),
    ("moved code: the longest matching run is the old place, the part's first line the new one",
     "def a():\n    total = compute(1)\n    return total\n" + "".join(f"n{i} = {i}\n" for i in range(60))
     + "def b():\n    pass\n",
     "# ... existing code ...\ndef b():\n    total = compute(1)\n    return total\n# ... existing code ...\n",
     "is in the input but could not be aligned"),
    ("moved code: two lines added inside the part are in the input elsewhere",
     "def a():\n    total = compute(1)\n    return total\n\n\ndef b():\n    x = 0\n    z = 0\n    w = 0\n",
     "# ... existing code ...\ndef b():\n    x = 0\n    z = 0\n    total = compute(1)\n    return total\n"
     "    w = 0\n", "already has elsewhere"),
    ("an empty input", "", "# ... existing code ...\nx = 1\n", "input is empty"),
]


@pytest.mark.parametrize("case, source, body, message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_case__snippet__refused_with_reason(case, source, body, message):
    from backend.core.snippet_apply import REFUSAL_KINDS

    instruction = "Rename x to y." if body is None else snippet(body)
    with pytest.raises(SnippetRefused, match=message.replace(".", r"\.")) as refused:
        apply_update_snippet(source, instruction)
    assert refused.value.kind in REFUSAL_KINDS and "\n" not in str(refused.value)


def test_a_repeated_context_run_is_placed_by_the_other_lines_of_the_part():
    # `    return x + 1` occurs twice; the part's other line names the function, so only one place fits
    source = "def a(x):\n    y = x\n    return x + 1\n\n\ndef b(x):\n    z = x\n    return x + 1\n"
    body = "# ... existing code ...\ndef b(x):\n    z = 2 * x\n    return x + 1\n"
    assert apply_update_snippet(source, snippet(body)) == source.replace("    z = x\n", "    z = 2 * x\n")


def test_crlf_input_keeps_its_endings_and_new_lines_get_crlf():
    source = SOURCE.replace("\n", "\r\n")
    body = "# ... existing code ...\n    def area(self):\n        # flat\n        return 0\n\n    def describe(self):\n# ...\n"
    merged = apply_update_snippet(source, snippet(body))
    expected = source.replace("    def area(self):\r\n        return self.width * self.height\r\n",
                              "    def area(self):\r\n        # flat\r\n        return 0\r\n")
    assert merged == expected
    assert "\n" not in merged.replace("\r\n", "")


def test_input_without_a_final_newline_stays_without_one():
    source = "a = 1\nb = 2\nc = 3"
    assert apply_update_snippet(source, snippet("# ...\nb = 2\nc = 4\n")) == "a = 1\nb = 2\nc = 4"
    assert apply_update_snippet(source, snippet("# ...\nb = 20\nc = 3\n")) == "a = 1\nb = 20\nc = 3"


def test_a_new_last_line_follows_the_input_convention():
    assert apply_update_snippet("a = 1\nb = 2\n", snippet("# ...\nb = 2\nc = 3\n")) == "a = 1\nb = 2\nc = 3\n"
    assert apply_update_snippet("a = 1\nb = 2", snippet("# ...\nb = 2\nc = 3\n")) == "a = 1\nb = 2\nc = 3"


def test_of_equal_blank_lines_the_one_next_to_the_anchor_is_taken():
    # the blank before `required = 2` is the one next to it, not the blank two lines up
    source = "x = 0\n\nflag = True\n\nrequired = 1\nother = 3\n"
    body = "# ... existing code ...\n\nrequired = 2\nother = 3\n# ... existing code ...\n"
    assert apply_update_snippet(source, snippet(body)) == "x = 0\n\nflag = True\n\nrequired = 2\nother = 3\n"


@pytest.mark.parametrize("line, marker", [
    ("# ... existing code ...", True), ("    // ...", True), ("/* \u2026 */", True), ("<!-- ... -->", True),
    ("// existing code", True), ("# Rest of the file unchanged", True), ("  // (unchanged code)", True),
    ("# remaining code as before", True),
    ("# a comment", False), ("x = [...]", False), ("print('...')", False), ("# the rest of it is tested below", False),
])
def test_marker__line__is_marker(line, marker):
    from backend.core.snippet_apply import MARKER

    assert bool(MARKER.match(line)) is marker


def test_find_and_split():
    lines = find_update_snippet(snippet("# ... existing code ...\nx = 1\n# ... existing code ...\ny = 2\n"))
    assert lines == ["# ... existing code ...", "x = 1", "# ... existing code ...", "y = 2"]
    parts = split_parts(lines)
    assert [(p.lines, p.marker_before, p.marker_after) for p in parts] == [
        (("x = 1",), True, True), (("y = 2",), True, False)]
    assert find_update_snippet("no fence here") is None


def test_generated_fast_apply_cases_merge_exactly_or_are_refused():
    """The training generator's snippet task on real standard-library code: the aligner may refuse
    (the model then writes the edit) but must almost never merge wrongly."""
    from backend.training import combined_edits, line_ops

    sources = [inspect.getsource(module) for module in (textwrap, random, inspect)]
    rng = random.Random(7)
    exact = wrong = refused = 0
    for _ in range(300):
        text = rng.choice(sources)
        all_lines = text.splitlines(keepends=True)
        start = rng.randrange(0, len(all_lines) - 60)
        window = all_lines[start:start + rng.randrange(20, 60)]
        made = combined_edits.snippet(window, "python", rng)
        if made is None:
            continue
        ops, instruction = made
        source, target = "".join(window), line_ops.apply_ops(window, ops)
        try:
            merged = apply_update_snippet(source, instruction)
        except SnippetRefused:
            refused += 1
            continue
        exact += merged == target
        wrong += merged != target
    total = exact + wrong + refused
    assert total >= 150
    assert wrong <= total * 0.02, (exact, wrong, refused)
    assert exact >= total * 0.85, (exact, wrong, refused)


def test_hostile_snippets_on_a_large_repetitive_input_are_refused():
    """Thousands of look-alike lines: every placement rule must say no (and stay cheap: the fuzzy
    placement only runs for parts of at most three non-blank lines)."""
    source = "".join(f"    value_{i} = compute(alpha_{i % 97}, beta_{i % 13}) + {i}\n" for i in range(5000))
    many_new = "".join(f"    value_{i} = compute(alpha_{i}, beta_{i}) + {i + 1}\n" for i in range(50))
    repeated = "    value_1 = compute(alpha_1, beta_1) + 1\n    x = 1\n" * 40
    for body in (many_new, repeated, "\n    value_77 = compute(alpha_77, beta_12) + 78\n\n"):
        with pytest.raises(SnippetRefused):
            apply_update_snippet(source, snippet(f"# ... existing code ...\n{body}# ... existing code ...\n"))


def test_snippet_from_diff_round_trips_through_the_aligner():
    from backend.core.edit_text import snippet_from_diff

    target = changed(SOURCE, "return self.width * self.height\n", "return self.width * self.height * 2\n")
    made = snippet_from_diff(SOURCE, target, context=2)
    assert made is not None and made.count("# ... existing code ...") == 2
    assert apply_update_snippet(SOURCE, made) == target
    assert snippet_from_diff(SOURCE, SOURCE) is None


def test_code_that_holds_a_fence_stays_inside_the_block():
    source = 'def f():\n    """Example:\n\n    ```py\n    f()\n    ```\n    """\n    return 1\n'
    body = '# ... existing code ...\n    ```py\n    f()\n    ```\n    """\n    return 2\n'
    expected = source.replace("return 1", "return 2")
    assert apply_update_snippet(source, snippet(body)) == expected  # indented ``` lines are content
    longer = "Apply this update:\n````\n# ...\n```\n    return 2\n````"  # an unindented ``` needs a longer fence
    assert find_update_snippet(longer) == ["# ...", "```", "    return 2"]
