"""Where a named function or class sits in an input: the lines an instruction that names it means.

"Delete the function `load`" means the lines from its decorators to the end of its body; "Add a
docstring to `load`: Read the file." means a new line right after its signature (Python) or right
above it (a JSDoc comment). Found only when exactly one `def` / `class` / `function` line defines
the name; blocks end by indentation (Python) or by counting braces (JavaScript). Braces and colons
inside strings and comments are counted like code: a definition that fools the count gets a wrong
extent (rare in real code; the generator's 1,330 named training cases end where it says, bar the
decorators it leaves behind). Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A definition's header can take this many lines (a long Python signature) before its colon.
MAX_SIGNATURE_LINES = 20


def definition_line(lines: Sequence[str], name: str) -> int | None:
    """The 1-based line that defines `name` (`def`, `async def`, `class`, `function`), when one
    line does; else None."""
    pattern = re.compile(rf"^\s*(?:export\s+)?(?:async\s+)?(?:def|class|function\*?)\s+{re.escape(name)}\b")
    found = [number for number, line in enumerate(lines, 1) if pattern.match(line)]
    return found[0] if len(found) == 1 else None


def is_python_header(line: str) -> bool:
    return re.match(r"^\s*(?:async\s+)?(?:def|class)\s", line) is not None


def signature_end(lines: Sequence[str], header: int) -> int | None:
    """The line that ends a Python header's signature (the first ending with `:`), or None."""
    for number in range(header, min(header + MAX_SIGNATURE_LINES, len(lines) + 1)):
        if lines[number - 1].split("#")[0].rstrip().endswith(":"):
            return number
    return None


def definition_lines(lines: Sequence[str], header: int) -> tuple[int, int] | None:
    """(first, last) lines of the definition at `header`: its decorators (the `@` lines right
    above it at its indentation) through the end of its body; None when its extent is unclear."""
    first = header
    while first > 1 and lines[first - 2].strip().startswith("@") and indent(lines[first - 2]) == indent(lines[header - 1]):
        first -= 1
    if is_python_header(lines[header - 1]):
        end = signature_end(lines, header)
        if end is None:
            return None
        for number in range(end + 1, len(lines) + 1):
            if lines[number - 1].strip():
                if indent(lines[number - 1]) <= indent(lines[header - 1]):
                    break
                end = number
        return first, end
    depth, opened = 0, False
    for number in range(header, len(lines) + 1):
        depth += lines[number - 1].count("{") - lines[number - 1].count("}")
        opened = opened or "{" in lines[number - 1]
        if opened and depth <= 0:
            return first, number
    return None


def docstring_point(lines: Sequence[str], header: int) -> tuple[int, str, str] | None:
    """Where a docstring for the definition at `header` goes: (the line it follows, 0 for the
    top; the indentation it takes; its form, "python" or "js"), or None when the definition
    already has one or its signature has no end."""
    if is_python_header(lines[header - 1]):
        end = signature_end(lines, header)
        if end is None:
            return None
        after = lines[end].strip() if end < len(lines) else ""
        if after.startswith(('"""', "'''", 'r"""')):
            return None
        deeper = end < len(lines) and indent(lines[end]) > indent(lines[header - 1])
        body = lines[end][: indent(lines[end])] if deeper else lines[header - 1][: indent(lines[header - 1])] + "    "
        return end, body, "python"
    if header > 1 and lines[header - 2].strip().endswith("*/"):
        return None
    return header - 1, lines[header - 1][: indent(lines[header - 1])], "js"


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))
