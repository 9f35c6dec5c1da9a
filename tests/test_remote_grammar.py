"""The one-item grammar a remote engine enforces (regex and GBNF), and the request shapes per engine."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.runtime.remote_client import CompletionsClient, ItemGrammar, request_body
from backend.runtime.remote_grammar import (
    GEN_BODY_REGEX,
    int_range_regex,
    item_gbnf,
    item_regex,
    second_number_regex,
)


@pytest.mark.parametrize(
    "low, high",
    [(1, 1), (1, 9), (1, 10), (1, 99), (1, 100), (1, 1234), (7, 305), (12, 12), (99, 101), (3, 47), (1, 5000)],
)
def test_int_range_regex__matches_exactly_low_to_high(low: int, high: int) -> None:
    pattern = re.compile(int_range_regex(low, high))
    matched = [i for i in range(0, 6000) if pattern.fullmatch(str(i))]
    assert matched == list(range(low, high + 1))
    assert not pattern.fullmatch("0" + str(low))  # no leading zeros
    assert not pattern.fullmatch("")


@pytest.mark.parametrize("low, high", [(0, 5), (6, 5)])
def test_int_range_regex__rejects_empty_or_zero_ranges(low: int, high: int) -> None:
    with pytest.raises(ValueError):
        int_range_regex(low, high)


_GEN = re.compile("<gen>" + GEN_BODY_REGEX)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["<", "/", "g", "e", "n", ">", "x", "\n", "</gen", "</ge", "<<", "é"]), max_size=14))
def test_gen_body__accepts_exactly_texts_without_the_closing_tag(parts: list[str]) -> None:
    text = "".join(parts)
    assert bool(_GEN.fullmatch(f"<gen>{text}</gen>")) == ("</gen>" not in text)


@pytest.mark.parametrize(
    "text, accepted",
    [
        ("", True),                                   # the program may end
        ('<copy lines="1-3"/>', True),
        ('<copy lines="3-1"/>', True),                # i <= j is checked by us, not the grammar
        ('<copy lines="0-3"/>', False),
        ('<copy lines="1-13"/>', False),              # past the 12 lines
        ('<copy lines="01-3"/>', False),
        ("<gen>x = 1\n</gen>", True),
        ("<gen></gen>", True),
        ('<gen>a</gen><copy lines="1-1"/>', False),   # one item per request
        ("hello", False),
    ],
)
def test_item_regex__one_item_or_nothing(text: str, accepted: bool) -> None:
    assert bool(re.fullmatch(item_regex(12), text)) == accepted


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ('copy lines="1-3"/>', True),
        ("gen>x = 1\n</gen>", True),
        ("", False),                                  # the prompt holds the `<`: an item must follow
        ('<copy lines="1-3"/>', False),
        ("<gen>x</gen>", False),
    ],
)
def test_item_regex_after_lt__the_item_without_its_opening(text: str, accepted: bool) -> None:
    assert bool(re.fullmatch(item_regex(12, after_lt=True), text)) == accepted


def test_item_gbnf_after_lt__same_rules_without_the_opening() -> None:
    plain, after = item_gbnf(12), item_gbnf(12, after_lt=True)
    assert after.startswith("root ::= item\n") and plain.startswith("root ::= item?\n")
    assert '"copy lines=' in after and '"gen>"' in after and '"<' not in after.split("body ::=")[0]
    assert item_gbnf(0, after_lt=True).startswith("root ::= gen\n")


def test_second_number_regex__bounded_below_by_the_first() -> None:
    pattern = re.compile(second_number_regex(5, 12))
    assert [i for i in range(20) if pattern.fullmatch(f'{i}"/>')] == list(range(5, 13))


def test_item_gbnf__quotes_literals_and_names_every_rule() -> None:
    grammar = item_gbnf(120)
    defined = set(re.findall(r"^(\w+) ::=", grammar, re.M))
    used = set(re.findall(r"\b(root|item|copy|num|gen|body|loop|leave)\b", grammar))
    assert defined == {"root", "item", "copy", "num", "gen", "body", "loop", "leave"}
    assert used <= defined
    # digits are quoted literals or classes, never bare
    num = next(line for line in grammar.splitlines() if line.startswith("num ::="))
    assert not re.search(r'(?<!["\[\-])\b[0-9]\b(?![\]"\-])', num.split("::=")[1])


GRAMMAR = ItemGrammar(regex="R", gbnf="G")


@pytest.mark.parametrize(
    "kind, grammar_field, expected",
    [
        ("vllm", "structured_outputs", {"regex": "R"}),   # vLLM >= 0.12 (guided_regex removed)
        ("sglang", "regex", "R"),                          # SGLang CompletionRequest.regex
        ("llamacpp", "grammar", "G"),                      # llama.cpp GBNF
    ],
)
def test_request_body__each_engine_gets_its_structured_output_field(kind: str, grammar_field: str, expected: object) -> None:
    body = request_body(kind, "PROMPT", max_tokens=7, stop=('"/>', "</gen>"), grammar=GRAMMAR, model="m")
    assert body[grammar_field] == expected
    assert body["prompt"] == "PROMPT" and body["max_tokens"] == 7 and body["stream"] is True
    assert body["stop"] == ['"/>', "</gen>"] and body["model"] == "m"
    others = {"structured_outputs", "regex", "grammar"} - {grammar_field}
    assert not others & body.keys()


def test_request_body__prefix_cache_and_usage_flags() -> None:
    llama = request_body("llamacpp", "p", max_tokens=1)
    assert llama["cache_prompt"] is True
    assert (llama["repeat_penalty"], llama["top_k"], llama["min_p"]) == (1.0, 0, 0.0)  # plain sampling
    for kind in ("vllm", "sglang"):
        assert request_body(kind, "p", max_tokens=1)["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: request_body("tgi", "p", max_tokens=1), "unknown engine kind"),
        (lambda: request_body("vllm", "p", max_tokens=0), "max_tokens"),
        (lambda: CompletionsClient("localhost:8000", "vllm"), "http://"),
        (lambda: CompletionsClient("http://x", "ollama"), "unknown engine kind"),
    ],
)
def test_bad_client_settings__clear_errors(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_client_root__accepts_a_v1_suffix() -> None:
    assert CompletionsClient("http://127.0.0.1:8000/v1/", "vllm").root == "http://127.0.0.1:8000"
