"""`evaluate`: does the model edit by itself? Model mode only: the source and the instruction go in.

Per corpus and per kind: programs finished and valid, exact match, and a failure taxonomy of the
copy-as-decode run (`classify`):

    exact            the output equals the target (and no error was reported)
    unfinished       the program did not end (token limit, context full, loop, cancel)
    invalid          it ended but cannot be resolved (or the decoder reported an error)
    no_change        it ended with an output equal to the input: the instruction was not carried out
                     (the largest failure of the shipped model: a gen that repeats the line it stands
                     for, or an early end whose rest was copied)
    off_by_one_start / off_by_one_end   same items as the oracle program, one copy's start / end off by 1
    wrong_range      same item kinds as the oracle, a copy range off by more
    wrong_gen_text   every copy range right, a generated text wrong
    wrong_structure  items differ from the oracle's in kind or number
    refused          the engine refused the request (e.g. the input does not fit the model's context)

`line_similarity` (difflib's ratio over the output's and the target's lines, mean over cases) is a
progress signal below exact match.

Speed (`--strategy ar --strategy pld`, on the first `--speed-limit` cases): the same case decoded
by plain decoding and prompt lookup of the same model in the same process; seconds are summed per
strategy and compared as ratios of sums (one pooling rule for every benchmark here).

Last stdout line: {"model", "corpora": {NAME: {"cases", "finished_valid", "exact_match", "failures",
"per_kind": {KIND: {"cases", "exact_match", "finished_valid"}}, "speed": {...}}}} with rates in 0..1.
"""

from __future__ import annotations

import difflib
from collections import Counter, defaultdict
from typing import Any

from backend.core.program import CopyLines, Gen, ProgramError, parse_program
from backend.data.corpora import EditCase, load_corpus
from backend.measure.replay import is_exact

FINISHED = ("eos", "complete")
HELDOUT_COMMITS = "commits-heldout"


def load_eval_corpus(name: str, data_dir: str | None, limit: int | None, *, min_lines: int = 0) -> list[EditCase]:
    """A named corpus, a JSONL path, or `commits-heldout` (commit edits of repositories that no
    training case came from); only cases whose source has at least `min_lines` lines; the first `limit`."""
    from backend.core.lines import line_count
    from backend.training.dataset import TRAIN_COMMIT_REPOS

    if name == HELDOUT_COMMITS:
        cases = [c for c in load_corpus("commits", data_dir) if c.meta.get("repo") not in TRAIN_COMMIT_REPOS]
    else:
        cases = load_corpus(name, data_dir)
    cases = [c for c in cases if line_count(c.source) >= min_lines]
    return cases[:limit] if limit is not None else cases


def case_kind(case: EditCase) -> str:
    return str(case.meta.get("kind") or case.meta.get("edit_kind") or "all")


def classify(result: Any, case: EditCase, oracle_ops: list[Any]) -> str:
    """The outcome of one model-mode copy-as-decode run (see the module docstring)."""
    if is_exact(result, case.target):
        return "exact"
    if result.stop_reason not in FINISHED:
        return "unfinished" if result.stop_reason in ("max_tokens", "loop", "cancel") else "invalid"
    try:
        ops = parse_program(result.program or "")
    except ProgramError:
        return "invalid"
    if result.error:
        return "invalid"
    if result.output == case.source:
        return "no_change"
    return compare_programs(ops, oracle_ops)


def compare_programs(ops: list[Any], oracle: list[Any]) -> str:
    """Why a finished program differs from the oracle program (both lists of ops)."""
    if len(ops) != len(oracle) or any(type(a) is not type(b) for a, b in zip(ops, oracle)):
        return "wrong_structure"
    copy_diffs = [(a, b) for a, b in zip(ops, oracle) if isinstance(a, CopyLines) and a != b]
    if copy_diffs:
        a, b = copy_diffs[0]
        if a.end == b.end and abs(a.start - b.start) == 1:
            return "off_by_one_start"
        if a.start == b.start and abs(a.end - b.end) == 1:
            return "off_by_one_end"
        return "wrong_range"
    if any(isinstance(a, Gen) and a != b for a, b in zip(ops, oracle)):
        return "wrong_gen_text"
    return "wrong_structure"


def line_similarity(output: str, target: str) -> float:
    """How close an output is to the target, 0..1: difflib's ratio over lines (1.0 = exact). A
    progress signal below exact match: a program one line off scores near 1, a lost file near 0."""
    return difflib.SequenceMatcher(None, output.splitlines(), target.splitlines(), autojunk=False).ratio()


def _metric(result: Any, name: str) -> float:
    metrics = result.metrics
    value = metrics.get(name) if isinstance(metrics, dict) else getattr(metrics, name, None)
    return float(value or 0)


class Evaluation:
    """Runs the cases of one corpus and keeps the per-case rows."""

    def __init__(self, engine: Any, *, strategies: tuple[str, ...], speed_limit: int | None, max_new_tokens: int) -> None:
        self.engine, self.strategies = engine, strategies
        self.speed_limit, self.max_new_tokens = speed_limit, max_new_tokens

    def run_case(self, index: int, case: EditCase) -> dict[str, Any]:
        from backend.core.oracle import oracle_program

        oracle = oracle_program(case.source, case.target, objective="cost", tokenize=self.engine.text_tokenizer())
        row: dict[str, Any] = {"id": case.id, "kind": case_kind(case)}
        for strategy in self.strategies:
            if strategy != "cad" and self.speed_limit is not None and index >= self.speed_limit:
                continue
            try:
                result = self.engine.run_to_result(case.source, case.instruction or "Apply the edit.", strategy=strategy,
                                                   mode="model", max_new_tokens=self._budget(strategy, case))
            except ValueError as error:  # the engine refuses it (e.g. longer than the model's context)
                row[strategy] = {"exact": False, "stop_reason": "refused", "seconds": 0.0, "prefill_seconds": 0.0,
                                 "forwards": 0, "output_tokens": 0}
                if strategy == "cad":
                    row.update(outcome="refused", program=None, error=str(error), line_similarity=0.0)
                    break
                continue
            row[strategy] = {
                "exact": is_exact(result, case.target),
                "stop_reason": result.stop_reason, "seconds": _metric(result, "wall_seconds"),
                "prefill_seconds": _metric(result, "prefill_seconds"), "forwards": int(_metric(result, "forwards")),
                "output_tokens": int(_metric(result, "output_tokens")),
                "requests": int(_metric(result, "requests")),  # on a server: one per program item
                "first_chunk_seconds": _metric(result, "first_chunk_seconds"),  # on a server: median per request
            }
            if strategy == "cad":
                row["outcome"] = classify(result, case, oracle)
                row["line_similarity"] = line_similarity(result.output, case.target)
                row["program"] = result.program
                row["error"] = result.error
                row["copied_rest"] = getattr(result.metrics, "copied_rest", None)  # early_end.py
                row["noop_refused"] = getattr(result.metrics, "noop_refused", 0)  # noop_guard.py
                row["shape_refused"] = getattr(result.metrics, "shape_refused", 0)  # shape_guard.py
                row["backward_refused"] = getattr(result.metrics, "backward_refused", 0)  # copy_order_guard.py
                row["past_end_refused"] = getattr(result.metrics, "past_end_refused", 0)  # the same
                row["written_by"] = getattr(result.metrics, "written_by", None) or "model"  # snippet_apply.py
                row["aligner_declined"] = getattr(result.metrics, "aligner_declined", None)
                row["window"] = getattr(result.metrics, "window", None)  # an input over the context: the lines edited
                add_retry(row, result)
                add_search(row, result)
        return row

    def _budget(self, strategy: str, case: EditCase) -> int:
        if strategy == "cad":
            return self.max_new_tokens
        # plain decoding writes the whole file: give it room for the target and some slack
        return max(self.max_new_tokens, int(len(self.engine.encode(case.target)) * 1.3) + 16)


def add_retry(row: dict[str, Any], result: Any) -> None:
    """A windowed edit run a second time in a smaller window (backend/runtime/window_retry.py): why,
    and the first try's seconds counted in `seconds` (what the user waited for)."""
    note = getattr(result.metrics, "window_retry", None)
    if not note:
        return
    row["window_retry"] = note
    row["cad"]["retry_seconds"] = result.metrics.retry_seconds
    row["cad"]["seconds"] += result.metrics.retry_seconds or 0.0


def add_search(row: dict[str, Any], result: Any) -> None:
    """A searched run (backend/runtime/search.py): its candidates, the winner's branch and score, and
    the time of every candidate in `seconds` (the winner's prompt prefill stays in prefill_seconds)."""
    candidates = getattr(result.metrics, "search_candidates", None)
    if not candidates:
        return
    row["search"] = {"candidates": candidates, "branch": result.metrics.search_branch,
                     "log_prob": sum(choice.log_prob for choice in result.choices)}
    row["cad"]["seconds"] = result.metrics.search_seconds - result.metrics.prefill_seconds


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates, failures, per-kind rates and the pooled speed of one corpus's rows."""
    cases = len(rows)
    outcomes = Counter(r.get("outcome", "not_run") for r in rows)
    finished = sum(r["cad"]["stop_reason"] in FINISHED and r.get("outcome") != "invalid" for r in rows if "cad" in r)
    per_kind: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["kind"]].append(row)
    for kind, group in sorted(groups.items()):
        per_kind[kind] = {
            "cases": len(group),
            "exact_match": sum(r.get("outcome") == "exact" for r in group) / len(group),
            "finished_valid": sum(r["cad"]["stop_reason"] in FINISHED and r.get("outcome") != "invalid" for r in group) / len(group),
            "written_by_aligner": sum(r.get("written_by") == "snippet aligner" for r in group),
        }
    return {
        "cases": cases,
        "finished_valid": finished / cases if cases else 0.0,
        "exact_match": outcomes["exact"] / cases if cases else 0.0,
        "failures": dict(sorted((k, v) for k, v in outcomes.items() if k != "exact")),
        "line_similarity": sum(r.get("line_similarity", 0.0) for r in rows) / cases if cases else 0.0,
        "copied_rest": sum(bool(r.get("copied_rest")) for r in rows),  # programs the decoder ended with the rest
        "noop_refused": sum(bool(r.get("noop_refused")) for r in rows),  # programs the no-op rule changed
        "shape_refused": sum(bool(r.get("shape_refused")) for r in rows),  # programs the shape guard changed
        "backward_refused": sum(bool(r.get("backward_refused")) for r in rows),  # programs kept from copying back
        "past_end_refused": sum(bool(r.get("past_end_refused")) for r in rows),  # programs ended past the input
        # edits the snippet aligner wrote (backend/core/snippet_apply.py), and how many of them are exact
        "written_by_aligner": sum(r.get("written_by") == "snippet aligner" for r in rows),
        "aligner_exact": sum(r.get("written_by") == "snippet aligner" and r.get("outcome") == "exact" for r in rows),
        "aligner_declined": sum(bool(r.get("aligner_declined")) for r in rows),
        "windowed": sum(bool(r.get("window")) for r in rows),  # inputs over the context, edited through a window
        "window_retried": sum(bool(r.get("window_retry")) for r in rows),  # run again in a smaller window
        "per_kind": per_kind,
        "speed": pooled_speed(rows),
    }


def pooled_speed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Summed seconds, forwards and output tokens per strategy over the cases every strategy ran;
    speed-ups are ratios of summed seconds, and per output token."""
    strategies = sorted({s for r in rows for s in ("cad", "ar", "pld") if s in r})
    common = [r for r in rows if all(s in r and r[s]["stop_reason"] != "refused" for s in strategies)]
    totals = {s: {"seconds": sum(r[s]["seconds"] for r in common), "forwards": sum(r[s]["forwards"] for r in common),
                  "output_tokens": sum(r[s]["output_tokens"] for r in common),
                  "requests": sum(r[s].get("requests", 0) for r in common),
                  "exact": sum(r[s]["exact"] for r in common)} for s in strategies}
    speed: dict[str, Any] = {"cases": len(common), "totals": totals}
    for other in ("ar", "pld"):
        if other in totals and "cad" in totals and totals["cad"]["seconds"] > 0:
            speed[f"cad_vs_{other}"] = totals[other]["seconds"] / totals["cad"]["seconds"]
            per_token = [totals[s]["seconds"] / max(1, totals[s]["output_tokens"]) for s in (other, "cad")]
            speed[f"cad_vs_{other}_per_output_token"] = per_token[0] / per_token[1] if per_token[1] > 0 else None
    return speed
