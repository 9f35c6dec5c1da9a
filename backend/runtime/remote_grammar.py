"""One program item as a grammar an inference server enforces: regex (vLLM, SGLang) or GBNF (llama.cpp).

A remote engine writes one item per request, so the grammar is `item?`:

    copy  := '<copy lines="' NUM '-' NUM '"/>'        NUM: 1..n (the input's line count), no leading 0
    gen   := '<gen>' TEXT '</gen>'                    TEXT: any text not containing '</gen>'
    ''    (empty: the model may end the program: EOS)

After a copy whose text ends in a run of whitespace (a blank line), remote.py puts the next
item's `<` into the prompt itself, so that the server tokenises the run as the trained context
has it; that request's grammar is the item without `<`, and not empty (`after_lt`).

The stop strings `"/>` and `</gen>` end the request as soon as an item closes (the server
leaves them out of the text it returns). A grammar can bound each number to 1..n but not
`i <= j` without listing pairs: that check stays ours (`remote.py` re-asks for the second
number, bounded to i..n, when i > j).

TEXT without `</gen>` as a regular expression: the automaton of "</gen>" (states = how much of it
was just read) written out. From state 1 (after '<') the text may go round through '<', '/<',
'/g<', '/ge<', '/gen<' (back to state 1) and leaves either to state 0 on any other character or
to the end on '/gen>'.
"""

from __future__ import annotations

COPY_PREFIX = '<copy lines="'
COPY_STOP = '"/>'
GEN_PREFIX = "<gen>"
GEN_STOP = "</gen>"
STOP_STRINGS = (COPY_STOP, GEN_STOP)

_LOOP_AT_LT = "(?:<|/<|/g<|/ge<|/gen<)*"
_LEAVE_LT = "(?:[^/<]|/[^g<]|/g[^e<]|/ge[^n<]|/gen[^<>])"
GEN_BODY_REGEX = f"(?:[^<]|<{_LOOP_AT_LT}{_LEAVE_LT})*<{_LOOP_AT_LT}/gen>"


def _int_range_pieces(low: int, high: int) -> list[tuple[str, ...]]:
    """Digit-class sequences whose union is the decimal numbers low..high (no leading zeros).

    Each piece is a tuple of character classes (e.g. ("[1-9]", "[0-9]")), one per digit.
    Rejects low < 1 or low > high (ValueError).
    """
    if low < 1 or low > high:
        raise ValueError(f"bad number range {low}..{high}")
    pieces: list[tuple[str, ...]] = []
    for width in range(len(str(low)), len(str(high)) + 1):
        lo = max(low, 10 ** (width - 1))
        hi = min(high, 10**width - 1)
        pieces += _same_width(str(lo), str(hi))
    return pieces


def _digit_class(a: str, b: str) -> str:
    return a if a == b else f"[{a}-{b}]"


def _same_width(lo: str, hi: str) -> list[tuple[str, ...]]:
    """Classes for lo..hi, both of the same width (the classic range-to-regex split)."""
    if len(lo) == 1:
        return [(_digit_class(lo, hi),)]
    if lo[0] == hi[0]:
        return [(lo[0],) + rest for rest in _same_width(lo[1:], hi[1:])]
    width = len(lo) - 1
    out: list[tuple[str, ...]] = []
    low_rest_full = lo[1:] == "0" * width
    high_rest_full = hi[1:] == "9" * width
    first = lo[0] if low_rest_full else chr(ord(lo[0]) + 1)
    last = hi[0] if high_rest_full else chr(ord(hi[0]) - 1)
    if not low_rest_full:
        out += [(lo[0],) + rest for rest in _same_width(lo[1:], "9" * width)]
    if first <= last:
        out.append((_digit_class(first, last),) + ("[0-9]",) * width)
    if not high_rest_full:
        out += [(hi[0],) + rest for rest in _same_width("0" * width, hi[1:])]
    return out


def int_range_regex(low: int, high: int) -> str:
    """A regular expression matching exactly the decimal numbers low..high."""
    return "(?:" + "|".join("".join(piece) for piece in _int_range_pieces(low, high)) + ")"


def item_regex(n_lines: int, *, after_lt: bool = False, first_line: int = 1) -> str:
    """One item or nothing, for an input of `n_lines` lines (vLLM / SGLang `regex`).
    A copy's numbers are first_line..n (copies move forward: backend/core/copy_order.py); with no
    line there (n_lines == 0, or every line copied) only a gen can be written. `after_lt`: the prompt
    already ends with the item's `<` (remote.py holds it there after some copies), so the item
    without it, and required."""
    lt, optional = ("", "") if after_lt else ("<", "?")
    gen = f"{lt}gen>{GEN_BODY_REGEX}"
    if first_line > n_lines:
        return f"(?:{gen}){optional}"
    number = int_range_regex(first_line, n_lines)
    return f'(?:{lt}copy lines="{number}-{number}"/>|{gen}){optional}'


def second_number_regex(first: int, n_lines: int) -> str:
    """After `<copy lines="{first}-`: the second number, first..n, and the tag's end."""
    return f'{int_range_regex(first, n_lines)}"/>'


# -- GBNF (llama.cpp) ------------------------------------------------------------------------


def _gbnf_number(low: int, high: int) -> str:
    def term(cls: str) -> str:
        return cls if cls.startswith("[") else f'"{cls}"'

    return " | ".join(" ".join(term(c) for c in piece) for piece in _int_range_pieces(low, high))


_GBNF_GEN = r'''gen ::= "<gen>" body
body ::= ( [^<] | "<" loop leave )* "<" loop "/gen>"
loop ::= ( "<" | "/<" | "/g<" | "/ge<" | "/gen<" )*
leave ::= [^/<] | "/" [^g<] | "/g" [^e<] | "/ge" [^n<] | "/gen" [^<>]
'''


def item_gbnf(n_lines: int, *, after_lt: bool = False, first_line: int = 1) -> str:
    """The same language as `item_regex`, as a llama.cpp GBNF grammar (root may be empty, except
    `after_lt`: the item without its leading `<`, required)."""
    lt, optional = ("", "") if after_lt else ("<", "?")
    gen_rules = _GBNF_GEN.replace('gen ::= "<gen>"', f'gen ::= "{lt}gen>"')
    if first_line > n_lines:
        return f"root ::= gen{optional}\n" + gen_rules
    return (
        f"root ::= item{optional}\n"
        "item ::= copy | gen\n"
        f'copy ::= "{lt}copy lines=\\"" num "-" num "\\"/>"\n'
        f"num ::= {_gbnf_number(first_line, n_lines)}\n" + gen_rules
    )


def second_number_gbnf(first: int, n_lines: int) -> str:
    return f'root ::= num "\\"/>"\nnum ::= {_gbnf_number(first, n_lines)}\n'
