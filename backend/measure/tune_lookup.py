"""Prompt lookup tuned on a dev split: the peer at its best without seeing the cases it is timed on.

For a corpus, the (n-gram, drafts) setting of the sweep (`prompt_lookup.SWEEP`: n-gram 1-4 x
drafts 10-128) with the least predicted decode seconds over the dev cases, which are disjoint from
the cases the replay times. In reference replay the forwards a setting runs are known without the
model (`prompt_lookup.reference_forwards`); their seconds come from this machine's measured
cost of one forward per token count (`forward_cost.forward_cost_table`, one table after 512 tokens:
the setting's rank, not its seconds, is what is used here; `bench` prices each context).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from backend.measure import strategy_bench as sb
from backend.measure.forward_cost import ForwardCost, forward_cost_table
from backend.runtime.prompt_lookup import TUNED_LOOKUP, lookup_label


def forward_cost(engine: Any, context: int = 512) -> ForwardCost:
    """Seconds of one forward of n tokens on this engine's model after `context` tokens (one table,
    interpolated in n, measured here)."""
    return ForwardCost({context: forward_cost_table(engine.loaded, context)})


def tune_on_dev(engine: Any, dev_cases: Sequence[Any], cost: Callable[[int, int], float]) -> dict[str, Any]:
    """The setting chosen on `dev_cases` (those that fit the context), how, and on which case ids.
    Falls back to the repository's TUNED_LOOKUP when no dev case fits (said in "chosen_by")."""
    prepared, _skipped = sb.prepare_fitting(engine, list(dev_cases), None) if dev_cases else ([], [])
    if not prepared:
        return {"setting": list(TUNED_LOOKUP), "label": lookup_label(TUNED_LOOKUP), "dev_cases": [],
                "chosen_by": "no dev case: the fixed tuned setting (bench's fastest on commit edits)"}
    ranked = sb.rank_settings(engine.loaded, prepared, cost)
    best = min(ranked, key=lambda s: (ranked[s]["predicted_seconds"], s))
    return {"setting": [best.ngram, best.drafts], "label": lookup_label((best.ngram, best.drafts)),
            "dev_cases": [c.id for c in prepared],
            "predicted_seconds": ranked[best]["predicted_seconds"],
            "chosen_by": "least predicted decode seconds over the dev cases (sweep n-gram 1-4 x drafts 10-128)"}
