"""Stage 4, perturbation: exact match under +-1-line span noise at several rates, on the line
coverage programs of the ceiling stage (first tokenizer), per corpus and pooled."""

from __future__ import annotations

from typing import Any

from backend.measure.perturb import perturbation_study
from backend.study.context import StudyContext


def run(ctx: StudyContext) -> None:
    config = ctx.config
    section: dict[str, Any] = {"rates": list(config.rates), "seed": config.seed,
                               "program": "line coverage oracle program", "corpora": {}}
    with ctx.stage("perturbation"):
        everything = []
        for name, results in ctx.ceilings[ctx.tokenizer_names()[0]].items():
            cases = {c.id: c for c in ctx.ceiling_cases(name)}
            programs = [(r.case_id, cases[r.case_id].source, cases[r.case_id].target, r.programs["line", "coverage"])
                        for r in results]
            everything += programs
            section["corpora"][name] = [r.to_dict() for r in perturbation_study(programs, config.rates, seed=config.seed)]
        section["pooled"] = [r.to_dict() for r in perturbation_study(everything, config.rates, seed=config.seed)]
    ctx.results["perturbation"] = section
