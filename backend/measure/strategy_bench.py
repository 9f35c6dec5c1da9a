"""Every decoding strategy on the same cases, timed in one process: the `bench` command's engine.

Reference replay (each case's target forced through the model) with:

    ar          plain decoding: one forced token per forward
    pld         prompt lookup at transformers' defaults (2-gram, 10 drafts)
    pld-best    prompt lookup at the fastest setting of the sweep (prompt_lookup.SWEEP) on these
                same cases: the most generous comparison (a tuned peer that saw the test set)
    cad         copy-as-decode: the oracle program, copies in one forward each
    cad-hybrid  copy-as-decode whose gens are also drafted by prompt lookup (when the decoder has it)

Why the sweep times only a few settings: in reference mode the forwards a setting runs, and the
context before each, are known without the model (`prompt_lookup.reference_forwards`); their
seconds are predicted by this machine's cost of one forward per token count and context
(`forward_cost.ForwardCost`, timed in the same run), and only the `top` best-predicted settings
(plus the default) are timed. The prediction is reported next to the measurement.

Bound: the closed-form wall-clock bound of the replayed programs (`ceiling.bound`: plain = gold
tokens x one step; copy-as-decode = (generated + tag tokens) x one step + one forward per copied
span), priced by the same forward costs after the cases' mean prompt, so each copy-as-decode
variant's measured speed-up over `ar` is reported as a share of the bound measured in this run.
Beside it the context-priced bound (`ceiling.context_bound`): every forward priced after the tokens
before it, which on long files is the closer one (plain decoding's late steps cost more).

Timing: after a warm-up, cases run one after another and, within a case, every strategy runs
back to back, `repeats` times (median per case), so each ratio compares runs of the same moment.
Seconds are decode seconds after the prompt prefill (the prompts differ between cad and the
others; prefill is reported apart). Pooling: sums of seconds over the cases, ratios of sums
(`backend.measure.replay.ratio`), as everywhere in this repository.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from backend.measure.replay import DEFAULT_INSTRUCTION, is_exact, ratio
from backend.runtime.baselines import replay_plain, replay_prompt_lookup, run_to_result
from backend.runtime.prompt_lookup import (
    DEFAULT_SETTING,
    SWEEP,
    PromptLookupSetting,
    fastest,
    parse_setting,
    predicted_seconds,
    reference_forwards,
)

STRATEGIES = ("ar", "pld", "pld-best", "cad", "cad-hybrid")
CAD_VARIANTS = ("cad", "cad-hybrid", "cad-no-tag-drafts")
OPTIONAL_VARIANTS = ("cad-hybrid", "cad-no-tag-drafts")  # `runners(skip=...)` may leave these out


@dataclass
class PreparedCase:
    id: str
    target: str
    plain: Any    # engine PreparedEdit for ar / pld (plain prompt)
    program: Any  # engine PreparedEdit for cad


@dataclass
class Timing:
    seconds: list[float] = field(default_factory=list)
    prefill: list[float] = field(default_factory=list)
    forwards: int = 0
    exact: bool = True
    metrics: dict[str, Any] = field(default_factory=dict)

    def add(self, result: Any, target: str) -> None:
        self.seconds.append(result.metrics.wall_seconds)
        self.prefill.append(result.metrics.prefill_seconds or 0.0)
        self.forwards = result.metrics.forwards
        self.metrics = result.metrics.to_dict()
        self.exact = self.exact and is_exact(result, target)


def prepare_cases(engine: Any, cases: Sequence[Any]) -> list[PreparedCase]:
    """Each case validated and tokenised once per prompt kind (the engine's EditError if refused)."""
    out = []
    for case in cases:
        instruction = case.instruction or DEFAULT_INSTRUCTION
        common = dict(mode="reference", target=case.target)
        out.append(PreparedCase(case.id, case.target,
                                engine.validate(case.source, instruction, strategy="ar", **common),
                                engine.validate(case.source, instruction, strategy="cad", **common)))
    return out


def prepare_fitting(engine: Any, cases: Sequence[Any], limit: int | None) -> tuple[list[PreparedCase], list[str]]:
    """The first `limit` cases (all: None) whose prompts and target fit the model's context, and the
    ids of those skipped before them as too long (a real commit file can exceed a 135M model's context)."""
    from backend.runtime.request import EditError

    kept: list[PreparedCase] = []
    skipped: list[str] = []
    for case in cases:
        if limit is not None and len(kept) >= limit:
            break
        try:
            kept.extend(prepare_cases(engine, [case]))
        except EditError as error:
            if "too long" not in str(error):
                raise
            skipped.append(case.id)
    return kept, skipped


class TableKernel:
    """A forward-cost model as the closed-form bound's kernel: a decode step is a 1-token forward, a
    copy of n tokens one n-token forward, both after `context` tokens (measured in this run)."""

    def __init__(self, cost: Callable[[int, int], float], context: int) -> None:
        self.cost, self.context = cost, context
        self.step_seconds = cost(1, context)

    def prefill_seconds(self, n: int) -> float:
        return self.cost(n, self.context)


def mean_prompt(cases: Sequence[PreparedCase]) -> int:
    """The cases' mean plain prompt length: the one context of the closed-form bound."""
    return int(sum(len(c.plain.prompt_ids) for c in cases) / max(1, len(cases)))


def versus_bound(engine: Any, cases: Sequence[PreparedCase], cost: Callable[[int, int], float],
                 speedup_vs_ar: dict[str, float | None]) -> dict[str, Any]:
    """The bound of the programs the cases replay (the oracle's cost programs, as `cad` forces them)
    priced by `cost` in closed form and by context, and each copy-as-decode variant's measured
    speed-up over ar as a share of each (no variant measured: the bounds alone)."""
    from backend.core.oracle import oracle_program
    from backend.measure.ceiling import Bound, bound, context_bound, program_stats

    tokenize = engine.text_tokenizer()
    stats, per_case = [], {}
    for case in cases:
        request = case.program.request
        ops = oracle_program(request.source, request.target, objective="cost", tokenize=tokenize)
        stats.append(program_stats(ops, request.source, request.target, tokenize=tokenize))
        per_case[case.id] = context_bound(stats[-1], plain_prompt=len(case.plain.prompt_ids),
                                          program_prompt=len(case.program.prompt_ids), cost=cost)
    by_context = Bound(sum(b.plain_seconds for b in per_case.values()), sum(b.copy_seconds for b in per_case.values()))
    priced = bound(stats, TableKernel(cost, mean_prompt(cases)))
    bound_speedup = ratio(priced.plain_seconds, priced.copy_seconds)
    context_speedup = ratio(by_context.plain_seconds, by_context.copy_seconds)
    measured = {k: v for k, v in speedup_vs_ar.items() if k in CAD_VARIANTS}
    return {"bound_speedup": bound_speedup, "bound_plain_seconds": priced.plain_seconds,
            "bound_copy_seconds": priced.copy_seconds, "measured_speedup": measured,
            "share_of_bound": {k: ratio(v, bound_speedup) for k, v in measured.items()},
            "context_bound_speedup": context_speedup, "context_bound_plain_seconds": by_context.plain_seconds,
            "context_bound_copy_seconds": by_context.copy_seconds,
            "share_of_context_bound": {k: ratio(v, context_speedup) for k, v in measured.items()},
            "context_bound_per_case": {i: b.to_dict() for i, b in per_case.items()},
            "tag_tokens": sum(x.tag_tokens for x in stats), "generated_tokens": sum(x.generated_tokens for x in stats),
            "copy_spans": sum(len(x.copy_spans) for x in stats)}


def rank_settings(loaded: Any, cases: Sequence[PreparedCase], cost: Callable[[int, int], float]) -> dict[PromptLookupSetting, dict[str, Any]]:
    """Every sweep setting's forwards and predicted decode seconds summed over the cases (and the
    seconds of each case, by id: `predict` reports them per case)."""
    ranked = {}
    for setting in SWEEP:
        forwards = [reference_forwards(c.plain.prompt_ids, c.plain.target_ids, setting, eos_ids=loaded.eos_ids)
                    for c in cases]
        per_case = {c.id: predicted_seconds(f, cost) for c, f in zip(cases, forwards)}
        ranked[setting] = {"forwards": sum(len(f) for f in forwards), "predicted_seconds": sum(per_case.values()),
                           "per_case_seconds": per_case}
    return ranked


def shortlist(ranked: dict[PromptLookupSetting, dict[str, float]], top: int) -> list[PromptLookupSetting]:
    """The `top` settings with the least predicted seconds, and the default."""
    best = sorted(ranked, key=lambda s: (ranked[s]["predicted_seconds"], s))[:max(1, top)]
    return list(dict.fromkeys([DEFAULT_SETTING, *best]))


def cheapest(cases: Sequence[PreparedCase]) -> PreparedCase:
    """The case with the fewest target tokens: the warm-up round's case (any case warms the model;
    on long files a whole round of the first one costs minutes)."""
    return min(cases, key=lambda c: len(c.plain.target_ids))


def runners(engine: Any, settings: Sequence[PromptLookupSetting],
            skip: Sequence[str] = ()) -> dict[str, Callable[[PreparedCase], Any]]:
    """Strategy name (pld settings by label) -> a function running one case to its DecodeResult;
    `skip` leaves out optional variants (OPTIONAL_VARIANTS)."""
    unknown = set(skip) - set(OPTIONAL_VARIANTS)
    if unknown:
        raise ValueError(f"cannot skip {sorted(unknown)}: only {', '.join(OPTIONAL_VARIANTS)} are optional")
    loaded = engine.loaded

    def plain(case: PreparedCase) -> Any:
        return run_to_result(replay_plain(loaded, list(case.plain.prompt_ids), list(case.plain.target_ids)))

    def lookup(setting: PromptLookupSetting) -> Callable[[PreparedCase], Any]:
        return lambda case: run_to_result(replay_prompt_lookup(
            loaded, list(case.plain.prompt_ids), list(case.plain.target_ids),
            max_ngram_size=setting.ngram, num_pred_tokens=setting.drafts))

    def cad(case: PreparedCase) -> Any:
        return run_to_result(engine.run_prepared(case.program))

    out: dict[str, Callable[[PreparedCase], Any]] = {"ar": plain, "cad": cad}
    out.update({f"pld:{s.label}": lookup(s) for s in settings})
    hybrid, untagged = reference_runner(hybrid=True), reference_runner(hybrid=False, tag_drafts=False)
    if "cad-hybrid" not in skip:
        out["cad-hybrid"] = lambda case: hybrid(engine, case)
    if "cad-no-tag-drafts" not in skip:
        out["cad-no-tag-drafts"] = lambda case: untagged(engine, case)
    return out


def time_cases(cases: Sequence[PreparedCase], run: dict[str, Callable[[PreparedCase], Any]], repeats: int,
               progress: Callable[[str], None] = lambda _: None) -> dict[str, dict[str, Timing]]:
    """timings[strategy][case id], every strategy back to back within a case, `repeats` rounds."""
    timings: dict[str, dict[str, Timing]] = {name: {c.id: Timing() for c in cases} for name in run}
    for round_ in range(repeats):
        for case in cases:
            for name, runner in run.items():
                timings[name][case.id].add(runner(case), case.target)
            progress(f"round {round_ + 1}/{repeats}: {case.id}")
    return timings


def pooled(per_case: dict[str, Timing]) -> dict[str, Any]:
    """Sum over the cases of each case's median seconds; forwards; all exact."""
    return {"seconds": sum(statistics.median(t.seconds) for t in per_case.values()),
            "prefill_seconds": sum(statistics.median(t.prefill) for t in per_case.values()),
            "forwards": sum(t.forwards for t in per_case.values()),
            "exact": all(t.exact for t in per_case.values())}


def tag_steps(per_case: dict[str, Timing]) -> dict[str, Any]:
    """Copy-as-decode's tag cost: tag tokens, the ones jump-forward forced and the chosen ones
    accepted from tag drafts (neither costs a decode step), and the decode steps left per copy
    (tag tokens - jump-forward tokens - accepted tag drafts, over copies)."""
    keys = ("copies", "tokens_tag", "jump_forward_tokens", "tag_drafts_accepted", "tokens_generated", "forwards")
    total: dict[str, Any] = {key: sum(int(t.metrics.get(key) or 0) for t in per_case.values()) for key in keys}
    steps = total["tokens_tag"] - total["jump_forward_tokens"] - total["tag_drafts_accepted"]
    total["tag_steps_per_copy"] = ratio(steps, total["copies"])
    total["tag_tokens_per_copy"] = ratio(total["tokens_tag"], total["copies"])
    return total


def summarize(timings: dict[str, dict[str, Timing]], ranked: dict[PromptLookupSetting, dict[str, float]]) -> dict[str, Any]:
    """The corpus's JSON: seconds and forwards per strategy, pld-best's setting, the sweep, ratios."""
    sums = {name: pooled(per_case) for name, per_case in timings.items()}
    swept = {parse_setting(name[len("pld:"):]): sums[name] for name in sums if name.startswith("pld:")}
    best = fastest({s: v["seconds"] for s, v in swept.items()})
    by_strategy = {"ar": sums["ar"], "pld": swept[DEFAULT_SETTING], "pld-best": swept[best], "cad": sums["cad"]}
    for extra in ("cad-hybrid", "cad-no-tag-drafts"):
        if extra in sums:
            by_strategy[extra] = sums[extra]
    seconds = {k: v["seconds"] for k, v in by_strategy.items()}
    return {
        "cases": len(next(iter(timings.values()))),
        "seconds": seconds,
        "forwards": {k: v["forwards"] for k, v in by_strategy.items()},
        "prefill_seconds": {k: v["prefill_seconds"] for k, v in by_strategy.items()},
        "exact": {k: v["exact"] for k, v in by_strategy.items()},
        "pld_best_setting": best.label,
        "tags": {k: tag_steps(timings[k]) for k in ("cad", "cad-hybrid", "cad-no-tag-drafts") if k in timings},
        "speedup_vs_ar": {k: ratio(seconds["ar"], v) for k, v in seconds.items()},
        "speedup_vs_pld_best": {k: ratio(seconds["pld-best"], v) for k, v in seconds.items()},
        "sweep": {s.label: {"forwards": int(r["forwards"]), "predicted_seconds": r["predicted_seconds"],
                            "seconds": swept[s]["seconds"] if s in swept else None} for s, r in ranked.items()},
    }


def predict(engine: Any, cases: Sequence[PreparedCase], cost: Callable[[int, int], float],
             ranked: dict[PromptLookupSetting, dict[str, Any]]) -> dict[str, Any]:
    """`bench --predict-only`: what timing would show, from forward counts and `cost` alone. Plain
    decoding is one step per target token after the prompt, prompt lookup's settings are `ranked`,
    and `cad-bound` is the context-priced bound of the oracle programs (one forward per copy, one
    step per tag or generated token): the least time any copy-as-decode program of these edits
    takes here (tag drafts and jump-forward can beat it by a few steps per copy)."""
    bound = versus_bound(engine, cases, cost, {})
    best = min(ranked, key=lambda s: (ranked[s]["predicted_seconds"], s))
    seconds = {"ar": bound["context_bound_plain_seconds"], "pld": ranked[DEFAULT_SETTING]["predicted_seconds"],
               "pld-best": ranked[best]["predicted_seconds"], "cad-bound": bound["context_bound_copy_seconds"]}
    per_case = {}
    for case in cases:  # each case with the corpus's best setting: on which files cad could lead by how much
        one = bound["context_bound_per_case"][case.id]
        lookup = ranked[best]["per_case_seconds"][case.id]
        per_case[case.id] = {"ar": one["plain_seconds"], "pld-best": lookup, "cad-bound": one["copy_seconds"],
                             "cad_bound_vs_pld_best": ratio(lookup, one["copy_seconds"])}
    return {"cases": len(cases), "predicted_seconds": seconds, "pld_best_setting": best.label, "per_case": per_case,
            "forwards": {"pld": int(ranked[DEFAULT_SETTING]["forwards"]), "pld-best": int(ranked[best]["forwards"])},
            "speedup_vs_ar": {k: ratio(seconds["ar"], v) for k, v in seconds.items()},
            "speedup_vs_pld_best": {k: ratio(seconds["pld-best"], v) for k, v in seconds.items()},
            "sweep": {s.label: {"forwards": int(r["forwards"]), "predicted_seconds": r["predicted_seconds"], "seconds": None}
                      for s, r in ranked.items()},
            "vs_bound": bound}


def library_check(engine: Any, cases: Sequence[PreparedCase], *, max_new_tokens: int = 64) -> dict[str, Any]:
    """Our plain and prompt-lookup loops against transformers' own `generate` (greedy, and with
    `prompt_lookup_num_tokens=10`) in model mode on the same prompts: total seconds (prefill
    included on both sides) and whether the greedy outputs agree token for token. Torch models only."""
    import torch

    from backend.runtime.baselines import decode_plain, decode_prompt_lookup

    loaded = engine.loaded
    seconds = {"ar": 0.0, "generate": 0.0, "pld": 0.0, "generate_pld": 0.0}
    same = {"ar": 0, "pld": 0}
    tokens = 0
    for case in cases:
        prompt = list(case.plain.prompt_ids)
        ours = {"ar": decode_plain, "pld": decode_prompt_lookup}
        outputs = {}
        for name, decode in ours.items():
            result = run_to_result(decode(loaded, prompt, max_new_tokens=max_new_tokens))
            seconds[name] += result.metrics.wall_seconds + (result.metrics.prefill_seconds or 0.0)
            outputs[name] = result.output
        ids = torch.tensor([prompt], device=loaded.device)
        for name, extra in (("generate", {}), ("generate_pld", {"prompt_lookup_num_tokens": 10})):
            started = time.perf_counter()
            with torch.inference_mode():
                out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                            do_sample=False, eos_token_id=list(loaded.eos_ids) or None, **extra)
            seconds[name] += time.perf_counter() - started
            new = [int(t) for t in out[0, len(prompt):] if int(t) not in loaded.eos_ids]
            text = loaded.tokenizer.decode(new, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            mine = outputs["ar" if name == "generate" else "pld"]
            same["ar" if name == "generate" else "pld"] += text == mine
            tokens += len(new) if name == "generate" else 0
    return {"cases": len(cases), "max_new_tokens": max_new_tokens, "generated_tokens": tokens, "seconds": seconds,
            "same_output": same, "ours_vs_generate": {"ar": ratio(seconds["generate"], seconds["ar"]),
                                                      "pld": ratio(seconds["generate_pld"], seconds["pld"])}}


def reference_runner(*, hybrid: bool, tag_drafts: bool = True) -> Callable[[Any, PreparedCase], Any]:
    """A reference replay of the oracle program through `decode_program`: `hybrid` adds
    prompt-lookup drafts inside gens (cad-hybrid); `tag_drafts` False decodes every chosen tag
    token in its own step (cad-no-tag-drafts: what the tag drafts save, in the same run)."""
    from backend.runtime.decoder import decode_program
    from backend.runtime.hybrid import DEFAULT_HYBRID

    def run(engine: Any, case: PreparedCase) -> Any:
        request = case.program.request
        program = engine.reference_program(request.source, request.target)
        return run_to_result(decode_program(
            engine.loaded, request.source, request.instruction, max_new_tokens=None, force_program=program,
            grammar=engine.grammar, prompt_ids=case.program.prompt_ids,
            hybrid=DEFAULT_HYBRID if hybrid else None, tag_drafts=tag_drafts))

    return run
