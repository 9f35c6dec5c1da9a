"""Stage 3, bound: the closed-form wall-clock bound from each kernel table and each corpus's cost
programs (priced with that table's copy cost), line and token granularity, per corpus and pooled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from backend.measure.ceiling import GRANULARITIES, ceiling_summary, corpus_ceilings, costs_from_kernel, pooled, stats_of
from backend.study.context import StudyContext

SLIM = ("cases", "gold_tokens", "copied_tokens", "generated_tokens", "tag_tokens", "copy_spans", "coverage",
        "span_histogram")


def run(ctx: StudyContext, tables: Sequence[dict[str, Any]] | None = None, *, stage: str = "bound") -> None:
    """Bounds for `tables` (default: every kernel table), appended to results["bound"]["tables"]."""
    from backend.data.kernel import KernelTable

    section: dict[str, Any] = ctx.results.setdefault("bound", {"objective": "cost", "tables": []})
    with ctx.stage(stage):
        for table_doc in (ctx.kernel_tables if tables is None else tables):
            kernel = KernelTable.from_dict(table_doc, origin=table_doc["label"])
            tok_name = table_doc["tokenizer"]
            tokenize = ctx.tokenizer(tok_name)
            costs = costs_from_kernel(kernel)
            # a failed round trip is left out here: the roundtrip section counts it
            per_corpus = {name: corpus_ceilings(ctx.ceiling_cases(name), tokenize=tokenize, objectives=("cost",),
                                                costs=costs, keep_failures=True)[0] for name in ctx.corpora}
            entry: dict[str, Any] = {"label": table_doc["label"], "model": kernel.model, "device": kernel.device,
                                     "dtype": kernel.dtype, "tokenizer": tok_name, "cost_model": asdict(costs),
                                     "corpora": {name: _flat(results, kernel) for name, results in per_corpus.items()},
                                     "pooled": _flat(pooled(per_corpus), kernel)}
            section["tables"].append(entry)
            line = entry["pooled"]["line"]["speedup"]
            ctx.log(f"[study] bound {entry['label']}: line {line and round(line, 2)}x pooled")


def _flat(results: Sequence[Any], kernel: Any) -> dict[str, Any]:
    """Per granularity: the bound's numbers beside the program totals, in one flat dict."""
    out = {}
    for granularity in GRANULARITIES:
        summary = ceiling_summary(stats_of(results, granularity, "cost"), kernel)
        out[granularity] = {**summary["bound"], **{key: summary[key] for key in SLIM}}
    return out
