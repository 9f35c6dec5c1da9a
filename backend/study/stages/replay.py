"""Stage 5, replay: measured wall clock of reference replay, cad vs ar vs pld (defaults and tuned), same cases, same model
(backend.measure.replay), with each exact cad program's closed-form bound beside it.

Replay subset (CPU is slow on long files; a plain replay of a 3,000-token stdlib file takes minutes):
cases whose source and target each have at most `replay_max_tokens` tokens under the model's
tokenizer, in a seeded order per corpus (`--quick`: smallest first), the first `limit` of the short
corpora (HumanEvalPack) and the first `long_limit` of the long ones (commits, stdlib-probe). The chosen
ids are in results.json.
"""

from __future__ import annotations

import random
from typing import Any

from backend.data.cases import EditCase
from backend.measure.replay import STRATEGIES, pool_by_corpus, replay_case, summarize_replay, warm_up
from backend.runtime.prompt_lookup import TUNED_LOOKUP, lookup_label
from backend.study.config import LONG_CORPORA
from backend.study.context import StudyContext
from backend.study.stages.kernel import kernel_label


def run(ctx: StudyContext) -> None:
    config = ctx.config
    kernel = ctx.model_kernel()
    tokenize = ctx.tokenizer(ctx.model_vocabulary)
    section: dict[str, Any] = {
        "model": config.model, "mode": "reference", "strategies": list(STRATEGIES),
        "tuned_lookup": lookup_label(TUNED_LOOKUP),
        "limit": config.limit, "long_limit": config.long_limit, "replay_max_tokens": config.replay_max_tokens,
        "order": config.replay_order, "kernel": kernel_label(kernel.to_dict()), "cases": [],
    }
    with ctx.stage("replay"):
        from backend.runtime.engine import EditEngine

        engine = EditEngine(ctx.loaded())
        warm_up(engine)
        for name in ctx.corpora:
            chosen = replay_cases(ctx, name)
            for index, case in enumerate(chosen, 1):
                record = replay_record(engine, case, name, tokenize, kernel)
                section["cases"].append(record)
                ctx.log(f"[study] replay {name} {index}/{len(chosen)} {case.id}: "
                        + ", ".join(f"{s} {record[s].get('wall_seconds') or float('nan'):.2f}s" for s in STRATEGIES))
        summaries = pool_by_corpus(section["cases"], lambda records: summarize_replay(records, kernel),
                                   names=list(ctx.corpora))
        section["pooled"] = summaries.pop("pooled")
        section["corpora"] = summaries
    ctx.results["replay"] = section


def replay_cases(ctx: StudyContext, name: str) -> list[EditCase]:
    """The replay subset of one corpus (see the module docstring)."""
    config = ctx.config
    count = ctx.tokenizer(ctx.model_vocabulary).count
    eligible = [c for c in ctx.corpora[name]
                if count(c.source) <= config.replay_max_tokens and count(c.target) <= config.replay_max_tokens]
    if config.replay_order == "shortest":
        eligible.sort(key=lambda c: (count(c.source) + count(c.target), c.id))
    else:
        random.Random(f"study:{config.seed}:{name}").shuffle(eligible)
    return eligible[: config.long_limit if name in LONG_CORPORA else config.limit]


def replay_record(engine: Any, case: EditCase, corpus: str, tokenize: Any, kernel: Any) -> dict[str, Any]:
    """One case replayed with every strategy, its token counts and, when cad was exact, the bound of
    the program cad ran (the program itself is not kept)."""
    from backend.core.program import parse_program
    from backend.measure.ceiling import case_bound, program_stats

    record: dict[str, Any] = {"corpus": corpus, "id": case.id, "gold_tokens": tokenize.count(case.target),
                              "source_tokens": tokenize.count(case.source)}
    record.update({k: v for k, v in replay_case(engine, case).items() if k != "id"})
    program = record["cad"].pop("program", None)
    if program and record["cad"]["exact"]:
        stats = program_stats(parse_program(program), case.source, case.target, tokenize=tokenize)
        record["bound"] = {**case_bound(stats, kernel).to_dict(), "copy_spans": list(stats.copy_spans),
                           "generated_tokens": stats.generated_tokens, "tag_tokens": stats.tag_tokens}
    return record
