"""The one request contract (backend.runtime.request): what every entry point refuses, as a table."""

from __future__ import annotations

import math

import pytest

from backend.runtime.request import APP_LIMITS, CLI_LIMITS, EditError, EditLimits, check_request

OK = dict(source="a\n", instruction="do it")

# overrides, limits, message fragment
REFUSED = [
    (dict(source="a\ud800b"), EditLimits(), "the input is not valid Unicode text: a lone surrogate U\\+D800 at character 2"),
    (dict(instruction="\udfff"), EditLimits(), "the instruction is not valid Unicode"),
    (dict(mode="reference", target="x\ud800"), EditLimits(), "the desired result is not valid Unicode"),
    (dict(max_new_tokens=math.nan), EditLimits(), "max new tokens must be a whole number, not nan"),
    (dict(max_new_tokens=math.inf), EditLimits(), "whole number, not inf"),
    (dict(max_new_tokens=12.5), EditLimits(), "whole number, not 12.5"),
    (dict(max_new_tokens=True), EditLimits(), "whole number"),
    (dict(max_new_tokens="12"), EditLimits(), "whole number"),
    (dict(max_new_tokens=0), EditLimits(), "positive integer between 1 and 4,096"),
    (dict(temperature=math.nan), EditLimits(), "temperature must be a finite number, not nan"),
    (dict(temperature=math.inf), EditLimits(), "temperature must be a finite number, not inf"),
    (dict(temperature=-0.5), EditLimits(), "temperature must be >= 0"),
    (dict(top_p=math.nan), EditLimits(), "top-p must be a finite number"),
    (dict(top_p=1.5), EditLimits(), "top-p must be in"),
    (dict(seed=1.5), EditLimits(), "seed must be a whole number"),
    (dict(source=""), CLI_LIMITS, "the input is empty"),
    (dict(source=""), APP_LIMITS, "the input is empty"),
    (dict(instruction="  "), CLI_LIMITS, "write an instruction"),
    (dict(mode="reference", target=""), APP_LIMITS, "needs the desired result"),
    (dict(source="x" * 20_001), APP_LIMITS, "20,001 characters; the limit is 20,000"),
    (dict(instruction="x" * 20_001), APP_LIMITS, "the instruction has 20,001 characters; the limit is 20,000"),
    (dict(strategy="beam"), APP_LIMITS, "unknown strategy 'beam'"),
    (dict(lookup=(0, 10)), EditLimits(), "prompt lookup 0-gram/10: the n-gram size must be 1-8"),
    (dict(lookup=(2, 1000)), EditLimits(), "drafts 1-256"),
    (dict(lookup=(2.5, 10)), EditLimits(), "n-gram size must be a whole number"),
    (dict(lookup="3/64"), EditLimits(), "must be \\(n-gram size, draft tokens\\)"),
]


@pytest.mark.parametrize("overrides, limits, message", REFUSED)
def test_check_request__overrides__limits__message(overrides, limits, message):
    with pytest.raises(EditError, match=message) as caught:
        check_request(**{**OK, **overrides}, limits=limits)
    assert "\n" not in str(caught.value)  # one line


def test_accepted_values_are_normalised_not_truncated():
    request = check_request("a\n", "x", max_new_tokens=64.0, temperature=1, top_p=0.9, seed=3.0)
    assert (request.max_new_tokens, request.temperature, request.seed) == (64, 1.0, 3)
    assert type(request.max_new_tokens) is int and type(request.temperature) is float
    assert check_request("a\n", "x", max_new_tokens=None, limits=APP_LIMITS).max_new_tokens == 512
    assert check_request("a\n", "x", mode="reference", target="b\n").target == "b\n"
    assert check_request("a\n", "x", target="ignored in model mode").target is None
    assert check_request("a\n", "x").lookup == (2, 10)  # transformers' defaults
    snippet = "Apply this update:\n```\n# ... existing code ...\n" + "x = 1\n" * 1_500 + "```"
    assert check_request("a\n", snippet, limits=APP_LIMITS).instruction == snippet  # fast-apply snippets are long
    assert check_request("a\n", "x", lookup=[3.0, 64]).lookup == (3, 64)


def test_the_library_default_still_allows_an_empty_input():
    """The engine writes from scratch when asked (tests/test_engine.py); only entry points refuse."""
    assert check_request("", None).source == ""
