"""Stage 5, replay: measured wall clock of reference replay, cad vs ar vs pld (defaults and tuned), same cases, same model
(backend.measure.replay), with each exact cad program's closed-form bound beside it.

Replay subset (CPU is slow on long files; a plain replay of a 3,000-token stdlib file takes minutes):
cases whose source and target each have at most `replay_max_tokens` tokens under the model's
tokenizer, in a seeded order per corpus (`--quick`: smallest first), the first `limit` of the short
corpora (HumanEvalPack) and the first `long_limit` of the long ones (commits, stdlib-probe). The chosen
ids are in results.json.

Tuned prompt lookup ("pld_tuned"): per corpus, the sweep setting predicted fastest on that corpus's
dev split, the first `tune_cases` cases in the same order that are not replayed (any length), so
the peer is tuned without seeing the cases it is timed on (backend.measure.tune_lookup).
"""

from __future__ import annotations

import random
from typing import Any

from backend.data.cases import EditCase
from backend.measure.replay import STRATEGIES, pool_by_corpus, replay_case, summarize_replay, warm_up
from backend.measure.tune_lookup import forward_cost, tune_on_dev
from backend.runtime.prompt_lookup import TUNED_LOOKUP
from backend.study.config import LONG_CORPORA
from backend.study.context import StudyContext
from backend.study.stages.kernel import kernel_label


def run(ctx: StudyContext) -> None:
    config = ctx.config
    kernel = ctx.model_kernel()
    tokenize = ctx.tokenizer(ctx.model_vocabulary)
    section: dict[str, Any] = {
        "model": config.model, "mode": "reference", "strategies": list(STRATEGIES),
        "tuned_lookup": "per corpus, chosen on a dev split", "tuned_by_corpus": {},
        "limit": config.limit, "long_limit": config.long_limit, "replay_max_tokens": config.replay_max_tokens,
        "order": config.replay_order, "kernel": kernel_label(kernel.to_dict()), "cases": [],
    }
    with ctx.stage("replay"):
        from backend.runtime.engine import EditEngine

        engine = EditEngine(ctx.loaded())
        warm_up(engine)
        cost = forward_cost(engine)
        for name in ctx.corpora:
            chosen, dev = replay_split(ctx, name)
            tuned = tune_on_dev(engine, dev, cost)
            section["tuned_by_corpus"][name] = tuned
            ctx.log(f"[study] replay {name}: prompt lookup tuned on {len(tuned['dev_cases'])} dev cases: {tuned['label']}")
            for index, case in enumerate(chosen, 1):
                record = replay_record(engine, case, name, tokenize, kernel, tuned=tuple(tuned["setting"]))
                section["cases"].append(record)
                ctx.log(f"[study] replay {name} {index}/{len(chosen)} {case.id}: "
                        + ", ".join(f"{s} {record[s].get('wall_seconds') or float('nan'):.2f}s" for s in STRATEGIES))
        summaries = pool_by_corpus(section["cases"], lambda records: summarize_replay(records, kernel),
                                   names=list(ctx.corpora))
        section["pooled"] = summaries.pop("pooled")
        section["corpora"] = summaries
    ctx.results["replay"] = section


def replay_split(ctx: StudyContext, name: str) -> tuple[list[EditCase], list[EditCase]]:
    """(the replay subset of one corpus, its dev split for tuning prompt lookup): see the module docstring."""
    config = ctx.config
    count = ctx.tokenizer(ctx.model_vocabulary).count
    ordered = list(ctx.corpora[name])
    if config.replay_order == "shortest":
        ordered.sort(key=lambda c: (count(c.source) + count(c.target), c.id))
    else:
        random.Random(f"study:{config.seed}:{name}").shuffle(ordered)
    eligible = [c for c in ordered if count(c.source) <= config.replay_max_tokens and count(c.target) <= config.replay_max_tokens]
    chosen = eligible[: config.long_limit if name in LONG_CORPORA else config.limit]
    # The dev split needs no timing (its forwards are predicted), so any length the model's context
    # holds will do: the next cases in the same order that are not replayed.
    timed = {c.id for c in chosen}
    return chosen, [c for c in ordered if c.id not in timed][: config.tune_cases]


def replay_record(engine: Any, case: EditCase, corpus: str, tokenize: Any, kernel: Any,
                  *, tuned: tuple[int, int] = TUNED_LOOKUP) -> dict[str, Any]:
    """One case replayed with every strategy, its token counts and, when cad was exact, the bound of
    the program cad ran (the program itself is not kept)."""
    from backend.core.program import parse_program
    from backend.measure.ceiling import case_bound, program_stats

    record: dict[str, Any] = {"corpus": corpus, "id": case.id, "gold_tokens": tokenize.count(case.target),
                              "source_tokens": tokenize.count(case.source)}
    record.update({k: v for k, v in replay_case(engine, case, tuned=tuned).items() if k != "id"})
    program = record["cad"].pop("program", None)
    if program and record["cad"]["exact"]:
        stats = program_stats(parse_program(program), case.source, case.target, tokenize=tokenize)
        record["bound"] = {**case_bound(stats, kernel).to_dict(), "copy_spans": list(stats.copy_spans),
                           "generated_tokens": stats.generated_tokens, "tag_tokens": stats.tag_tokens}
    return record
