"""Likelihood search: a few branches of the greedy program, the most probable finished one kept.

Greedy decoding takes the likeliest token at each step, which need not give the likeliest program.
Scoring the held-out dev cases the shipped model got wrong, teacher-forced, found the right program
more probable than the model's own in 10 of 58 (docs/results.md), most often one line number away
("Change 2 to 12 on line 14": the gold program at log-probability -1.52, the greedy one, which kept
`2`, at -1.54). So the search decodes greedily once with every choice traced (its log-probability
and the runner-up's), then re-decodes `branches` times, each time taking the runner-up at one of the
greedy run's least certain choices (smallest margin) and greedy after it; of the programs that
finished, the one with the highest total log-probability of its choices wins (ties: the earlier).
Copies, jump-forward text and the copied rest are forced, so they add nothing to a score.

A branch replays the greedy run's choices up to its branch point (`decode_program(decisions=...)`),
so it reaches exactly the same state there. Each branch is a whole decode (the prompt is kept in the
cache between them): the search costs about `branches + 1` edits' time, and the winner's metrics
report all of it (`search_seconds`).

Measured with the shipped adapter (docs/results.md, "Likelihood search"): 3 branches took the first
80 dev cases from 22 to 23 exact (2 gained, 1 lost) at 4.3x the time, and line similarity fell
0.950 -> 0.946. Where the right program was more probable, the choice that leads to it was seldom
among the least certain, and a branch that ends the program early scores well (fewer choices to
pay for). So it is opt-in (`--search K`), not the default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from backend.runtime.decode_run import Choice, DecodeRun
from backend.runtime.events import DecodeEvent, DecodeResult

FINISHED = ("eos",)


@dataclass(frozen=True)
class Candidate:
    events: list[DecodeEvent]   # the run's events, the done event last
    result: DecodeResult
    branch: int | None          # the index of the choice taken differently, None for greedy

    @property
    def log_prob(self) -> float:
        return sum(choice.log_prob for choice in self.result.choices)

    @property
    def finished(self) -> bool:
        return self.result.stop_reason in FINISHED and not self.result.partial and self.result.error is None


def branch_points(choices: Sequence[object], branches: int) -> list[int]:
    """The indices of the `branches` least certain choices that had a runner-up, in decode order."""
    open_choices = [i for i, choice in enumerate(choices) if choice.runner_up is not None]  # type: ignore[attr-defined]
    least_certain = sorted(open_choices, key=lambda i: (choices[i].margin, i))[:branches]  # type: ignore[attr-defined]
    return sorted(least_certain)


def best_candidate(candidates: Sequence[Candidate]) -> Candidate:
    """The finished candidate with the highest log-probability; the greedy one if none finished."""
    finished = [c for c in candidates if c.finished]
    if not finished:
        return candidates[0]
    return max(finished, key=lambda c: c.log_prob)  # max keeps the first of equals: greedy first


def search_events(decode: Callable[[Sequence[int]], Iterator[DecodeEvent]], branches: int) -> Iterator[DecodeEvent]:
    """The winning candidate's events, its done event's metrics counting every candidate's time.

    `decode(decisions)` starts one traced greedy run whose first choices are `decisions`."""
    greedy = run_candidate(decode, (), None)
    candidates = [greedy]
    for index in branch_points(greedy.result.choices, branches):
        taken = [choice.token for choice in greedy.result.choices[:index]]
        taken.append(greedy.result.choices[index].runner_up)
        candidates.append(run_candidate(decode, taken, index))
    winner = best_candidate(candidates)
    seconds = sum(c.result.metrics.wall_seconds + c.result.metrics.prefill_seconds for c in candidates)
    metrics = replace(winner.result.metrics, search_candidates=len(candidates), search_seconds=seconds,
                      search_branch=winner.branch)
    yield from winner.events[:-1]
    done = winner.events[-1]
    yield replace(done, result=replace(winner.result, metrics=metrics))


def run_candidate(decode: Callable[[Sequence[int]], Iterator[DecodeEvent]], decisions: Sequence[int],
                  branch: int | None) -> Candidate:
    events = list(decode(decisions))
    result = events[-1].result
    assert result is not None, "a decode ends with its done event"
    return Candidate(events, result, branch)


def traced_choice(run: DecodeRun, logits: torch.Tensor) -> int | None:
    """The decoder's choice in a traced run: the next of `run.decisions` while any are left, else the
    greedy one; either way recorded in `run.choices` with its log-probability and the runner-up's."""
    assert run.choices is not None
    log_probs = run.grammar.log_probs(logits, run.state)
    if log_probs is None:
        return None
    index = len(run.choices)
    best = torch.topk(log_probs, 2)
    ranked = [(int(t), float(v)) for t, v in zip(best.indices, best.values) if v > float("-inf")]
    token = run.decisions[index] if index < len(run.decisions) else ranked[0][0]
    runner_up = next(((t, v) for t, v in ranked if t != token), (None, float("-inf")))
    run.choices.append(Choice(token, float(log_probs[token]), *runner_up))
    return token
