"""Hybrid copy-as-decode: prompt-lookup drafts inside <gen>, checked in the same forward."""

from __future__ import annotations

import pytest

from backend.core.oracle import oracle_program
from backend.runtime.baselines import run_to_result
from backend.runtime.decoder import decode_program
from backend.runtime.hybrid import DEFAULT_HYBRID
from backend.runtime.prompt import reference_program
from backend.runtime.prompt_lookup import PromptLookupSetting

SOURCE = ("def area(width, height):\n    return width * height\n\n\n"
          "def perimeter(width, height):\n    return 2 * (width + height)\n")
# the changed lines repeat most of their tokens from the input: drafts find them
TARGET = SOURCE.replace("return width * height", "return float(width) * float(height)").replace(
    "return 2 * (width + height)", "return 2 * (width + height) + 0")


def replay(loaded, hybrid):
    program = reference_program(oracle_program(SOURCE, TARGET, objective="cost", tokenize=loaded.tokenizer))
    return run_to_result(decode_program(loaded, SOURCE, "Edit.", max_new_tokens=None, force_program=program,
                                        hybrid=hybrid))


@pytest.mark.parametrize("setting", [DEFAULT_HYBRID, PromptLookupSetting(1, 64)])
def test_hybrid_reference_replay_is_exact_with_fewer_forwards(tiny_model, setting):
    plain, hybrid = replay(tiny_model, None), replay(tiny_model, setting)
    assert plain.output == hybrid.output == TARGET and hybrid.error is None
    assert hybrid.metrics.accepted_draft_tokens > 0
    assert hybrid.metrics.forwards < plain.metrics.forwards
    # the drafts saved exactly one forward per accepted token, no more: the rest is unchanged
    assert plain.metrics.tokens_generated == hybrid.metrics.tokens_generated
    assert plain.metrics.tokens_tag == hybrid.metrics.tokens_tag


def test_hybrid_model_mode_output_equals_greedy(tiny_model):
    runs = [run_to_result(decode_program(tiny_model, SOURCE, "Edit.", max_new_tokens=40, hybrid=h))
            for h in (None, PromptLookupSetting(1, 32))]
    assert runs[0].output == runs[1].output and runs[0].program == runs[1].program
    assert runs[1].metrics.forwards <= runs[0].metrics.forwards
