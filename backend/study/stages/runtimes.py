"""Stage 6, runtimes: the replay's cases again on each other CPU runtime (llama.cpp), in this run,
beside the PyTorch replay (issue 11: "the study and the benchmark report both runtimes side by side").

Each runtime's plain decode step is timed here (median of 31 after 5 warm-up steps, 512-token
context). Per corpus, seconds are summed over the cases every strategy replayed exactly on every
runtime, so the runtimes are compared on the same cases; each (runtime, strategy) is set against the
fastest runtime's plain decoding: what a CPU user would pick instead. A runtime that cannot run the
model here (llama-cpp-python missing, no GGUF file) is recorded as skipped with the reason.
"""

from __future__ import annotations

from typing import Any

from backend.measure.replay import STRATEGIES, replay_case, warm_up
from backend.runtime.prompt_lookup import TUNED_LOOKUP
from backend.study.context import StudyContext


def run(ctx: StudyContext) -> None:
    replay = ctx.results.get("replay")
    if not replay or not ctx.config.replay_runtimes:
        return
    from backend.runtime.engine import EditEngine

    by_id = {(name, case.id): case for name, cases in ctx.corpora.items() for case in cases}
    chosen = [(record["corpus"], by_id[(record["corpus"], record["id"])]) for record in replay["cases"]]
    section: dict[str, Any] = {"runtimes": {}, "skipped": {}}
    with ctx.stage("runtimes"):
        torch_step = EditEngine(ctx.loaded()).step_seconds(warmup=5, steps=31)
        section["runtimes"]["torch"] = {"step_seconds": torch_step, "cases": _slim(replay["cases"])}
        for name in ctx.config.replay_runtimes:
            engine = _open(ctx, name, section)
            if engine is None:
                continue
            warm_up(engine)
            records = []
            tuned = {c: tuple(t["setting"]) for c, t in (replay.get("tuned_by_corpus") or {}).items()}
            for index, (corpus, case) in enumerate(chosen, 1):
                records.append({"corpus": corpus, **replay_case(engine, case, tuned=tuned.get(corpus, TUNED_LOOKUP))})
                ctx.log(f"[study] {name} replay {index}/{len(chosen)} {case.id}")
            section["runtimes"][name] = {"step_seconds": engine.step_seconds(warmup=5, steps=31), "cases": _slim(records)}
        section["corpora"] = compare_runtimes(section["runtimes"], list(ctx.corpora))
    ctx.results["runtimes"] = section


def _open(ctx: StudyContext, name: str, section: dict[str, Any]) -> Any:
    from backend.runtime.models import ModelUnavailable
    from backend.runtime.runtimes import open_engine

    try:
        return open_engine(ctx.config.model, runtime=name)
    except (ModelUnavailable, ValueError) as error:
        section["skipped"][name] = str(error)
        ctx.log(f"[study] runtime {name} skipped: {error}")
        return None


def _slim(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case: corpus, id, and each strategy's exactness and wall seconds (what the comparison uses)."""
    return [{"corpus": r["corpus"], "id": r["id"],
             **{s: {"exact": bool(r[s].get("exact")), "wall_seconds": r[s].get("wall_seconds")} for s in STRATEGIES}}
            for r in records]


def compare_runtimes(runtimes: dict[str, dict[str, Any]], corpora: list[str]) -> dict[str, Any]:
    """Per corpus: the cases every strategy replayed exactly on every runtime, summed seconds per
    (runtime, strategy), and each against the fastest runtime's plain decoding (x faster)."""
    out: dict[str, Any] = {}
    for corpus in corpora:
        exact_everywhere = None
        for result in runtimes.values():
            ids = {c["id"] for c in result["cases"] if c["corpus"] == corpus and all(c[s]["exact"] for s in STRATEGIES)}
            exact_everywhere = ids if exact_everywhere is None else exact_everywhere & ids
        if not exact_everywhere:
            continue
        seconds = {rt: {s: sum(c[s]["wall_seconds"] for c in r["cases"] if c["corpus"] == corpus and c["id"] in exact_everywhere)
                        for s in STRATEGIES} for rt, r in runtimes.items()}
        fastest_plain = min(seconds, key=lambda rt: seconds[rt]["ar"])
        plain = seconds[fastest_plain]["ar"]
        out[corpus] = {"cases": len(exact_everywhere), "seconds": seconds, "fastest_plain": fastest_plain,
                       "vs_fastest_plain": {f"{rt}/{s}": plain / v for rt, row in seconds.items() for s, v in row.items() if v > 0}}
    return out
