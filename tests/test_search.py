"""Likelihood search (backend/runtime/search.py): branch points, the winner's choice, and the traced
decoder it rests on (decisions replayed exactly, log-probabilities under the mask), on the fake
model (tests/fake_model.py). The real model's gain is measured in docs/results.md, not here."""

import math
from dataclasses import dataclass, replace

import pytest
import torch

from backend.core.fsm import TokenFSM
from backend.core.program import CopyLines, Gen
from backend.runtime.decode_run import Choice
from backend.runtime.decoder import decode_program
from backend.runtime.engine import EditEngine
from backend.runtime.events import DecodeEvent
from backend.runtime.grammar import Grammar
from backend.runtime.prompt import context_text
from backend.runtime.search import Candidate, best_candidate, branch_points, search_events
from fake_model import VOCAB_SIZE, FakeModel, byte_vocabulary

SOURCE = "one\ntwo\nthree\nfour\n"
EDIT = [CopyLines(1, 1), Gen("TWO\n"), CopyLines(3, 4)]


def choice(log_prob, runner_up_log_prob=-math.inf, token=1, runner_up=2):
    return Choice(token, log_prob, runner_up if runner_up_log_prob > -math.inf else None, runner_up_log_prob)


# -- pure logic -------------------------------------------------------------------------------


def test_branch_points_are_the_least_certain_choices_in_decode_order():
    choices = [choice(-0.1, -5.0), choice(-0.7, -0.8), choice(0.0), choice(-0.5, -1.5), choice(-0.6, -0.9)]
    # margins: 4.9, 0.1, none (no runner-up), 1.0, 0.3
    assert branch_points(choices, 2) == [1, 4]
    assert branch_points(choices, 3) == [1, 3, 4]
    assert branch_points(choices, 10) == [0, 1, 3, 4]   # a choice without a runner-up is never a branch
    assert branch_points(choices, 0) == []


@dataclass
class FakeResult:
    choices: tuple
    stop_reason: str = "eos"
    partial: bool = False
    error: str | None = None


def candidate(log_probs, branch=None, **result):
    return Candidate([], FakeResult(tuple(choice(lp) for lp in log_probs), **result), branch)


def test_the_most_probable_finished_candidate_wins():
    greedy = candidate([-1.0, -2.0])                   # -3.0
    better = candidate([-1.0, -0.5], branch=1)         # -1.5
    unfinished = candidate([-0.1], branch=0, stop_reason="max_tokens", partial=True)
    assert best_candidate([greedy, better, unfinished]) is better


def test_a_tie_keeps_the_greedy_program():
    greedy, other = candidate([-1.0]), candidate([-0.5, -0.5], branch=0)
    assert best_candidate([greedy, other]) is greedy


def test_the_greedy_program_stands_when_nothing_finished():
    greedy = candidate([-1.0], stop_reason="loop", partial=True)
    other = candidate([-0.1], branch=0, stop_reason="error", error="no token allowed")
    assert best_candidate([greedy, other]) is greedy


# -- the traced decoder on the fake model -----------------------------------------------------


@pytest.fixture(scope="module")
def grammar():
    vocabulary = byte_vocabulary()
    return Grammar(vocabulary, TokenFSM(vocabulary), VOCAB_SIZE, torch.device("cpu"))


def decode(grammar, script_ops=EDIT, **options):
    model = FakeModel(context_text(script_ops, SOURCE))
    return decode_program(model, SOURCE, "Edit.", grammar=grammar, max_new_tokens=80, **options)


def result_of(events):
    return list(events)[-1].result


def test_tracing_changes_nothing_but_records_every_choice(grammar):
    plain = result_of(decode(grammar))
    traced = result_of(decode(grammar, trace=True))
    assert traced.program == plain.program and traced.output == "one\nTWO\nthree\nfour\n"
    assert plain.choices == ()
    # one choice per decode step the model made (tokens it chose; jump-forward and copies are forced)
    assert len(traced.choices) == traced.metrics.tokens_generated + traced.metrics.tokens_tag - traced.metrics.jump_forward_tokens + 1
    assert traced.choices[-1].token == 256  # the last choice is EOS
    assert all(c.log_prob <= 0 for c in traced.choices)
    # the fake model scores its scripted token 10 above the rest: every choice is near-certain
    assert all(c.log_prob > -0.05 and c.margin > 5 for c in traced.choices if c.runner_up is not None)


def test_replaying_all_decisions_reproduces_the_run(grammar):
    traced = result_of(decode(grammar, trace=True))
    replay = result_of(decode(grammar, decisions=[c.token for c in traced.choices]))
    assert replay.program == traced.program and replay.choices == traced.choices


def test_a_branch_takes_the_runner_up_then_decodes_greedily(grammar):
    traced = result_of(decode(grammar, trace=True))
    # the choice that writes 'T' of "TWO": branch there to the runner-up
    index = next(i for i, c in enumerate(traced.choices) if c.token == ord("T"))
    runner_up = traced.choices[index].runner_up
    branched = result_of(decode(grammar, decisions=[c.token for c in traced.choices[:index]] + [runner_up]))
    assert branched.choices[:index] == traced.choices[:index]
    assert branched.choices[index].token == runner_up
    assert branched.choices[index].log_prob == pytest.approx(traced.choices[index].runner_up_log_prob)
    assert branched.program.startswith('<copy lines="1-1"/><gen>' + chr(runner_up))


def test_log_probs_are_a_distribution_over_the_allowed_tokens_only(grammar):
    logits = torch.randn(VOCAB_SIZE)
    state = grammar.fsm.start(4)
    log_probs = grammar.log_probs(logits, state)
    allowed = set(grammar.allowed_ids(state))
    assert torch.exp(log_probs).sum().item() == pytest.approx(1.0, abs=1e-5)
    assert all((log_probs[i] > -math.inf) == (i in allowed) for i in range(VOCAB_SIZE))
    assert torch.equal(logits, logits.clone())  # not changed in place: the caller may still choose from it


def test_a_traced_run_must_be_greedy(grammar):
    with pytest.raises(ValueError, match="greedy"):
        decode(grammar, trace=True, temperature=0.7)


# -- the engine ---------------------------------------------------------------------------------


def test_search_events_yield_the_winner_and_count_every_candidate(grammar):
    decoded = []

    def decode_with(decisions):
        decoded.append(list(decisions))
        return decode(grammar, decisions=decisions, trace=True)

    events = list(search_events(decode_with, 2))
    result = events[-1].result
    assert len(decoded) == 3 and decoded[0] == []   # greedy first, then one run per branch
    assert result.metrics.search_candidates == 3 and result.metrics.search_seconds > 0
    # the fake model's script is far likelier than any branch: the greedy program wins
    assert result.metrics.search_branch is None and result.output == "one\nTWO\nthree\nfour\n"
    assert all(isinstance(e, DecodeEvent) for e in events) and [e.kind for e in events].count("done") == 1


def test_the_engine_searches_only_when_asked(tiny_model):
    plain = EditEngine(tiny_model).run_to_result(SOURCE, "Edit.", strategy="cad", mode="model", max_new_tokens=8)
    assert plain.metrics.search_candidates is None and plain.choices == ()
    searched = EditEngine(tiny_model, search_branches=2).run_to_result(
        SOURCE, "Edit.", strategy="cad", mode="model", max_new_tokens=8)
    assert searched.metrics.search_candidates is not None and 1 <= searched.metrics.search_candidates <= 3
    assert searched.choices and all(c.log_prob <= 0 for c in searched.choices)


def test_a_negative_branch_count_is_refused(tiny_model):
    with pytest.raises(ValueError, match="search_branches"):
        EditEngine(tiny_model, search_branches=-1)


def test_a_remote_engine_refuses_search_instead_of_ignoring_it():
    from backend.runtime.runtimes import open_engine

    with pytest.raises(ValueError, match="in process only"):
        open_engine(None, engine_url="http://127.0.0.1:9", engine_kind="llamacpp", search_branches=2)


def test_sampling_ignores_search(tiny_model):
    """Search is a greedy procedure: a sampled run decodes once, as asked."""
    result = EditEngine(tiny_model, search_branches=2).run_to_result(
        SOURCE, "Edit.", strategy="cad", mode="model", max_new_tokens=8, temperature=0.8, seed=1)
    assert result.metrics.search_candidates is None
