"""Stage 6, model mode: the model writing programs itself (no reference), on a seeded sample of
HumanEvalPack Python and JS alternating: validity and exact match (backend.measure.replay.is_exact)."""

from __future__ import annotations

import random
import time
from typing import Any

from backend.data.cases import EditCase
from backend.measure.replay import is_exact, ratio
from backend.study.context import StudyContext


def run(ctx: StudyContext) -> None:
    config = ctx.config
    section: dict[str, Any] = {"model": config.model, "strategy": "cad", "mode": "model",
                               "max_new_tokens": config.model_max_new_tokens, "temperature": 0.0, "cases": []}
    with ctx.stage("model_mode"):
        from backend.runtime.engine import EditEngine

        engine = EditEngine(ctx.loaded())
        sample = model_sample(ctx)
        for index, case in enumerate(sample, 1):
            record = model_record(engine, case, config.model_max_new_tokens)
            section["cases"].append(record)
            ctx.log(f"[study] model mode {index}/{len(sample)} {case.id}: valid={record['valid']} exact={record['exact']}")
        cases = section["cases"]
        section["sample"] = len(cases)
        section["valid"] = sum(c["valid"] for c in cases)
        section["exact"] = sum(c["exact"] for c in cases)
        section["validity_rate"] = ratio(section["valid"], len(cases))
        section["exact_match"] = ratio(section["exact"], len(cases))
        section["copied_any"] = sum(bool((c["metrics"] or {}).get("tokens_copied")) for c in cases)
    ctx.results["model_mode"] = section


def model_sample(ctx: StudyContext) -> list[EditCase]:
    """`model_cases` cases, HumanEvalPack Python and JS alternating (every corpus when neither is there),
    each pool in a seeded order."""
    pools = [ctx.corpora[n] for n in ("humanevalpack-python", "humanevalpack-js") if n in ctx.corpora]
    pools = pools or [ctx.corpora[n] for n in ctx.corpora]
    rng = random.Random(f"study-model:{ctx.config.seed}")
    shuffled = [rng.sample(pool, len(pool)) for pool in pools]
    sample = []
    for i in range(ctx.config.model_cases):
        pool = shuffled[i % len(shuffled)]
        if i // len(shuffled) < len(pool):
            sample.append(pool[i // len(shuffled)])
    return sample


def model_record(engine: Any, case: EditCase, max_new_tokens: int) -> dict[str, Any]:
    """One model-mode run: valid = a complete program without error; exact as everywhere."""
    started = time.perf_counter()
    result = engine.run_to_result(case.source, case.instruction or "Fix the bug.", strategy="cad", mode="model",
                                  max_new_tokens=max_new_tokens)
    seconds = time.perf_counter() - started
    valid = result.error is None and not result.partial
    return {"id": case.id, "valid": valid, "exact": valid and is_exact(result, case.target),
            "stop_reason": result.stop_reason, "error": result.error, "partial": result.partial,
            "program": result.program, "seconds": seconds, "metrics": result.metrics.to_dict()}
