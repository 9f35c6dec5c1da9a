"""Derived sections (no extra run), from what the replay and model-mode stages recorded:
losslessness (the resolver's round trip and exactness through the model) and boundary
(re-tokenisation at copy joins, jump-forward tokens)."""

from __future__ import annotations

from typing import Any

from backend.measure.replay import boundary_summary, exact_counts, pool_by_corpus
from backend.study.context import StudyContext


def losslessness(ctx: StudyContext) -> None:
    through_model = pool_by_corpus(ctx.results["replay"]["cases"], exact_counts, names=list(ctx.corpora))
    ctx.results["losslessness"] = {
        "resolver": ctx.results["roundtrip"],
        "model": {"mode": "reference", "corpora": through_model},
    }


def boundary(ctx: StudyContext) -> None:
    corpora = pool_by_corpus(ctx.results["replay"]["cases"], boundary_summary, names=list(ctx.corpora))
    model_mode = ctx.results.get("model_mode", {}).get("cases", [])
    ctx.results["boundary"] = {
        "source": "replayed cad runs (reference mode)", "corpora": corpora,
        "model_mode": {
            "cases": len(model_mode),
            "boundary_retokenized": sum(_count(c, "boundary_retokenized") for c in model_mode),
            "jump_forward_tokens": sum(_count(c, "jump_forward_tokens") for c in model_mode),
        },
    }


def _count(case: dict[str, Any], key: str) -> int:
    return int((case["metrics"] or {}).get(key, 0) or 0)
