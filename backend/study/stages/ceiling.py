"""Stage 2, ceiling + roundtrip: copy ceiling of the coverage programs, line and token granularity,
per tokenizer and corpus (backend.measure.ceiling); every such program rendered, parsed and resolved
back to its target (the text path), counted as the round trip."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from backend.data.cases import EditCase
from backend.data.corpora import load_corpus
from backend.measure.ceiling import GRANULARITIES, corpus_ceilings, pooled, stats_of, totals
from backend.study.context import StudyContext


def run(ctx: StudyContext) -> None:
    section: dict[str, Any] = {"objective": "coverage", "tokenizers": {}}
    roundtrip: dict[str, Any] = {"tokenizers": {}}
    roundtrip_seconds = 0.0
    with ctx.stage("ceiling"):
        for tok_name in ctx.tokenizer_names():
            tokenize = ctx.tokenizer(tok_name)
            per_tok: dict[str, Any] = {"corpora": {}}
            trip_tok: dict[str, Any] = {"corpora": {}}
            ctx.ceilings[tok_name] = {}
            for name in ctx.corpora:
                cases = ctx.ceiling_cases(name)
                results, failures = corpus_ceilings(cases, tokenize=tokenize, objectives=("coverage",),
                                                    keep_failures=True)
                ctx.ceilings[tok_name][name] = results
                per_tok["corpora"][name] = {"cases": len(cases), **{
                    g: {**totals(stats_of(results, g, "coverage")).to_dict(),
                        "per_case_coverage": [s.coverage for s in stats_of(results, g, "coverage")]}
                    for g in GRANULARITIES}}
                started = time.perf_counter()
                trip_tok["corpora"][name] = roundtrip_counts(cases, results, failures, tokenize)
                roundtrip_seconds += time.perf_counter() - started
            everything = pooled(ctx.ceilings[tok_name])
            per_tok["pooled"] = {g: totals(stats_of(everything, g, "coverage")).to_dict() for g in GRANULARITIES}
            trip_tok["pooled"] = sum_counts(trip_tok["corpora"].values())
            section["tokenizers"][tok_name] = per_tok
            roundtrip["tokenizers"][tok_name] = trip_tok
            ctx.log(f"[study] ceiling {tok_name}: line {per_tok['pooled']['line']['coverage']:.3f}, "
                    f"token {per_tok['pooled']['token']['coverage']:.3f} pooled")
        section["declaration_variant"] = declaration_variant(ctx)
    ctx.results["ceiling"] = section
    ctx.results["roundtrip"] = roundtrip
    ctx.results["stages"]["roundtrip"] = {"seconds": roundtrip_seconds, "note": "inside the ceiling stage"}


def declaration_variant(ctx: StudyContext) -> dict[str, float | None]:
    """HumanEvalPack line coverage (qwen2.5) with the declaration prepended to source and target: a
    variant the published figure may have used; it explains part of any difference."""
    out: dict[str, float | None] = {}
    tokenize = ctx.tokenizer(ctx.tokenizer_names()[0])
    for name in ("humanevalpack-python", "humanevalpack-js"):
        if name not in ctx.corpora:
            continue
        cases = load_corpus(name, ctx.config.data_dir, prepend_declaration=True)
        if ctx.config.ceiling_limit is not None:
            cases = cases[: ctx.config.ceiling_limit]
        results, _ = corpus_ceilings(cases, tokenize=tokenize, granularities=("line",), objectives=("coverage",))
        out[name] = totals(stats_of(results, "line", "coverage")).coverage
    return out


def roundtrip_counts(cases: Sequence[EditCase], results: Sequence[Any], failures: Sequence[dict[str, str]],
                     tokenize: Any) -> dict[str, Any]:
    """Render each oracle program to text, parse it back, resolve it: count exact round trips."""
    from backend.core.program import render_program
    from backend.core.resolve import resolve_program

    by_id = {c.id: c for c in cases}
    counts: dict[str, Any] = {"cases": len(cases), "failures": list(failures)}
    for granularity in GRANULARITIES:
        ok = 0
        for result in results:
            case = by_id[result.case_id]
            text = render_program(result.programs[granularity, "coverage"])
            source_tokens = list(tokenize(case.source)) if granularity == "token" else None
            try:
                ok += resolve_program(text, case.source, source_tokens=source_tokens) == case.target
            except ValueError as error:
                counts["failures"].append({"id": case.id, "granularity": granularity, "error": str(error)})
        counts[granularity] = {"ok": ok, "cases": len(cases)}
    return counts


def sum_counts(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Round-trip counts of several corpora added up."""
    items = list(items)
    return {"cases": sum(i["cases"] for i in items),
            **{g: {"ok": sum(i[g]["ok"] for i in items), "cases": sum(i[g]["cases"] for i in items)}
               for g in GRANULARITIES},
            "failures": [f for i in items for f in i["failures"]]}
