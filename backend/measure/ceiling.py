"""Copy-ceiling analysis: how many gold tokens an oracle program copies, and the wall-clock bound it implies.

Token accounting (one tokenizer, a plain `tokenize(text) -> pieces` callable):
- gold tokens: pieces of the whole target, tokenised at once.
- Each op of the program produces a char segment of the target. Every gold token is attributed to the
  segment holding its FIRST character (a token that straddles a boundary, e.g. "\\n\\n" or "\\n    " across
  a line end, counts once, for the earlier segment). So copied + generated == gold exactly.
- copied tokens: gold tokens attributed to copy ops; generated tokens: those attributed to gens.
- copy spans: one entry per copy op, its attributed tokens (0 is possible: a one-line copy whose only
  token merged into the previous segment's last token). Histogram buckets 0, 1, 2-3, 4-7, ..., 256-511, 512+.
- tag tokens: the tag strings of every op (`tag_text`: the copy tag, or `<gen>` and `</gen>`), each
  tokenised on its own; the optional newline after an item is not counted.

Closed-form bound from a kernel table (`step_seconds`, `prefill_seconds(n)`):
    T_plain = gold * step
    T_copy  = (generated + tag) * step + sum over copy spans of prefill(max(1, span tokens))
    speed-up = T_plain / T_copy, per corpus and pooled as a ratio of summed times (not a mean of ratios).
A zero-token span still costs one forward of one token (the copied text must enter the cache).

Two programs per granularity: the "coverage" program (the ceiling: most tokens copied) and the "cost"
program (least estimated decode cost; with a kernel table its copy cost is `CostModel.from_kernel`).
The cost program is the headline for the bound: it is what a model should emit; the coverage program
copies blank lines through 11-token tags, which is a loss.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from backend.data.cases import EditCase
from backend.core.cost_model import CostModel
from backend.core.lines import split_lines
from backend.core.oracle import oracle_program
from backend.core.program import CopyLines, CopyTokens, Gen, Op, tag_text
from backend.core.resolve import resolve_program

Tokenize = Callable[[str], Sequence[str]]
GRANULARITIES = ("line", "token")
OBJECTIVES = ("coverage", "cost")
HEADLINE_OBJECTIVE = "cost"
HISTOGRAM_BUCKETS = ("0", "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127", "128-255", "256-511", "512+")


class Kernel(Protocol):
    step_seconds: float

    def prefill_seconds(self, n: int) -> float: ...


@dataclass(frozen=True)
class ProgramStats:
    """Token accounting of one program for one case (see the module docstring)."""

    gold_tokens: int
    copied_tokens: int
    generated_tokens: int
    tag_tokens: int
    copy_spans: tuple[int, ...]  # attributed tokens of each copy op, in program order
    gens: int
    ops: int
    # (is a copy, attributed tokens, tag tokens) of each op in program order: what `context_bound` walks
    op_tokens: tuple[tuple[bool, int, int], ...] = ()

    @property
    def coverage(self) -> float | None:
        return self.copied_tokens / self.gold_tokens if self.gold_tokens else None

    def to_dict(self) -> dict:
        return {"gold_tokens": self.gold_tokens, "copied_tokens": self.copied_tokens,
                "generated_tokens": self.generated_tokens, "tag_tokens": self.tag_tokens,
                "copy_spans": list(self.copy_spans), "gens": self.gens, "ops": self.ops, "coverage": self.coverage}


@dataclass(frozen=True)
class Totals:
    """Sums over cases of one (granularity, objective) program."""

    cases: int
    gold_tokens: int
    copied_tokens: int
    generated_tokens: int
    tag_tokens: int
    copy_spans: int
    gens: int
    histogram: dict[str, int] = field(default_factory=dict)

    @property
    def coverage(self) -> float | None:
        return self.copied_tokens / self.gold_tokens if self.gold_tokens else None

    def to_dict(self) -> dict:
        return {"cases": self.cases, "gold_tokens": self.gold_tokens, "copied_tokens": self.copied_tokens,
                "generated_tokens": self.generated_tokens, "tag_tokens": self.tag_tokens,
                "copy_spans": self.copy_spans, "gens": self.gens, "coverage": self.coverage,
                "span_histogram": dict(self.histogram)}


@dataclass(frozen=True)
class Bound:
    plain_seconds: float
    copy_seconds: float

    @property
    def speedup(self) -> float | None:
        return self.plain_seconds / self.copy_seconds if self.copy_seconds > 0 else None

    def to_dict(self) -> dict:
        return {"plain_seconds": self.plain_seconds, "copy_seconds": self.copy_seconds, "speedup": self.speedup}


def histogram_bucket(tokens: int) -> str:
    """The bucket label of a span of `tokens` tokens: "0", "1", "2-3", "4-7", ..., "512+"."""
    if tokens < 0:
        raise ValueError(f"span of {tokens} tokens")
    if tokens == 0:
        return "0"
    if tokens >= 512:
        return "512+"
    low = 1 << (tokens.bit_length() - 1)
    return "1" if low == 1 else f"{low}-{2 * low - 1}"


def span_histogram(spans: Iterable[int]) -> dict[str, int]:
    """Counts per bucket, every bucket present (zeros included), in bucket order."""
    counts = dict.fromkeys(HISTOGRAM_BUCKETS, 0)
    for tokens in spans:
        counts[histogram_bucket(tokens)] += 1
    return counts


def op_texts(ops: Sequence[Op], source: str, *, source_tokens: Sequence[str] | None = None) -> list[str]:
    """The text each op produces. Raises ValueError (via ResolveError) for an out-of-range copy."""
    lines = split_lines(source)
    texts = []
    for op in ops:
        if isinstance(op, Gen):
            texts.append(op.text)
        else:
            units: Sequence[str] | None = lines if isinstance(op, CopyLines) else source_tokens
            if units is None or op.end > len(units):
                resolve_program([op], source, source_tokens=source_tokens)  # raises the resolver's error
            texts.append("".join(units[op.start - 1:op.end]))  # type: ignore[index]
    return texts


def program_stats(
    ops: Sequence[Op],
    source: str,
    target: str,
    *,
    tokenize: Tokenize,
    source_tokens: Sequence[str] | None = None,
    target_tokens: Sequence[str] | None = None,
) -> ProgramStats:
    """Token accounting of `ops` (which must produce `target` from `source`). Raises ValueError otherwise.

    `source_tokens` (needed for CopyTokens) and `target_tokens` default to `tokenize(...)`. Changes no state.
    """
    if source_tokens is None and any(isinstance(op, CopyTokens) for op in ops):
        source_tokens = list(tokenize(source))
    texts = op_texts(ops, source, source_tokens=source_tokens)
    if "".join(texts) != target:
        raise ValueError("the program does not produce the target")
    pieces = list(tokenize(target)) if target_tokens is None else list(target_tokens)
    starts: list[int] = []  # char offset where each non-empty segment starts, and its op index
    owners: list[int] = []
    offset = 0
    for index, text in enumerate(texts):
        if text:
            starts.append(offset)
            owners.append(index)
        offset += len(text)
    attributed = [0] * len(ops)
    offset = 0
    for piece in pieces:
        attributed[owners[bisect_right(starts, offset) - 1]] += 1
        offset += len(piece)
    tag_cache: dict[str, int] = {}

    def tag_count(tag: str) -> int:
        if tag not in tag_cache:
            tag_cache[tag] = len(tokenize(tag))
        return tag_cache[tag]

    copied = sum(n for op, n in zip(ops, attributed) if not isinstance(op, Gen))
    return ProgramStats(
        gold_tokens=len(pieces),
        copied_tokens=copied,
        generated_tokens=len(pieces) - copied,
        tag_tokens=sum(tag_count(tag) for op in ops for tag in tag_text(op)),
        copy_spans=tuple(n for op, n in zip(ops, attributed) if not isinstance(op, Gen)),
        gens=sum(isinstance(op, Gen) for op in ops),
        ops=len(ops),
        op_tokens=tuple((not isinstance(op, Gen), n, sum(tag_count(tag) for tag in tag_text(op)))
                        for op, n in zip(ops, attributed)),
    )


@dataclass(frozen=True)
class CaseCeiling:
    """One case's programs and their accounting, keyed by (granularity, objective)."""

    case_id: str
    programs: dict[tuple[str, str], list[Op]]
    stats: dict[tuple[str, str], ProgramStats]


def case_ceiling(
    case: EditCase,
    *,
    tokenize: Tokenize,
    granularities: Sequence[str] = GRANULARITIES,
    objectives: Sequence[str] = OBJECTIVES,
    costs: CostModel = CostModel(),
) -> CaseCeiling:
    """Oracle programs for `case` and their token accounting.

    Every program is checked to resolve to the target (a failed round trip raises AssertionError: an
    oracle bug, never a property of the data). `costs` prices the "cost" objective.
    """
    target_tokens = list(tokenize(case.target))
    source_tokens = list(tokenize(case.source)) if "token" in granularities else None
    programs, stats = {}, {}
    for granularity in granularities:
        for objective in objectives:
            ops = oracle_program(case.source, case.target, granularity=granularity, objective=objective,
                                 tokenize=tokenize, costs=costs)
            resolved = resolve_program(ops, case.source, source_tokens=source_tokens if granularity == "token" else None)
            if resolved != case.target:
                raise AssertionError(f"{case.id}: {granularity}/{objective} oracle program does not round-trip")
            programs[granularity, objective] = ops
            stats[granularity, objective] = program_stats(
                ops, case.source, case.target, tokenize=tokenize, source_tokens=source_tokens, target_tokens=target_tokens)
    return CaseCeiling(case.id, programs, stats)


def totals(stats: Iterable[ProgramStats]) -> Totals:
    """Sum per-case accounting into corpus (or pooled) totals."""
    items = list(stats)
    spans = [n for s in items for n in s.copy_spans]
    return Totals(
        cases=len(items),
        gold_tokens=sum(s.gold_tokens for s in items),
        copied_tokens=sum(s.copied_tokens for s in items),
        generated_tokens=sum(s.generated_tokens for s in items),
        tag_tokens=sum(s.tag_tokens for s in items),
        copy_spans=len(spans),
        gens=sum(s.gens for s in items),
        histogram=span_histogram(spans),
    )


def case_bound(stats: ProgramStats, kernel: Kernel) -> Bound:
    """T_plain = gold*step; T_copy = (generated + tag)*step + sum prefill(max(1, span))."""
    step = kernel.step_seconds
    copy = (stats.generated_tokens + stats.tag_tokens) * step + sum(kernel.prefill_seconds(max(1, n)) for n in stats.copy_spans)
    return Bound(stats.gold_tokens * step, copy)


def bound(stats: Iterable[ProgramStats], kernel: Kernel) -> Bound:
    """Summed times over cases (the pooled speed-up is a ratio of sums)."""
    plain = copy = 0.0
    for item in stats:
        one = case_bound(item, kernel)
        plain += one.plain_seconds
        copy += one.copy_seconds
    return Bound(plain, copy)


def context_bound(stats: ProgramStats, *, plain_prompt: int, program_prompt: int,
                  cost: Callable[[int, int], float]) -> Bound:
    """The bound with each forward priced after the context it runs at (`cost(n, context)`, seconds
    of one n-token forward): plain decoding's i-th step after plain_prompt + i tokens; the program's
    tag and generated tokens one step each and each copy one forward, after program_prompt + the
    tokens before it (tags included). The closed form prices every forward at one context, so on
    long files it under-prices plain decoding's late steps more than the program's few forwards."""
    plain = sum(cost(1, plain_prompt + i) for i in range(stats.gold_tokens))
    copy, context = 0.0, program_prompt
    for is_copy, tokens, tags in stats.op_tokens:
        copy += sum(cost(1, context + j) for j in range(tags))
        context += tags
        copy += cost(max(1, tokens), context) if is_copy else sum(cost(1, context + j) for j in range(tokens))
        context += tokens
    return Bound(plain, copy)


def costs_from_kernel(kernel: Kernel) -> CostModel:
    """The oracle's affine copy cost fitted to a kernel table (via `CostModel.from_kernel`)."""
    rows = [(row.n, row.prefill_seconds) for row in kernel.rows]  # type: ignore[attr-defined]
    return CostModel.from_kernel(kernel.step_seconds, rows)


# --- aggregation over corpora (the one rule the ceiling command and the study share) ---------------


def corpus_ceilings(
    cases: Iterable[EditCase],
    *,
    tokenize: Tokenize,
    granularities: Sequence[str] = GRANULARITIES,
    objectives: Sequence[str] = OBJECTIVES,
    costs: CostModel = CostModel(),
    keep_failures: bool = False,
) -> tuple[list[CaseCeiling], list[dict[str, str]]]:
    """`case_ceiling` of every case and the round-trip failures. A failed round trip raises
    AssertionError, or with `keep_failures` is left out and listed as `{"id", "error"}`."""
    results: list[CaseCeiling] = []
    failures: list[dict[str, str]] = []
    for case in cases:
        try:
            results.append(case_ceiling(case, tokenize=tokenize, granularities=granularities, objectives=objectives,
                                        costs=costs))
        except AssertionError as error:  # the oracle's own round-trip check failed
            if not keep_failures:
                raise
            failures.append({"id": case.id, "error": str(error)})
    return results, failures


def stats_of(results: Iterable[CaseCeiling], granularity: str, objective: str) -> list[ProgramStats]:
    """The accounting of one (granularity, objective) program over cases."""
    return [r.stats[granularity, objective] for r in results]


def pooled(per_corpus: Mapping[str, Sequence[CaseCeiling]]) -> list[CaseCeiling]:
    """Every corpus's cases together: pooled numbers are sums over all of them (ratios of sums)."""
    return [r for results in per_corpus.values() for r in results]


def ceiling_summary(stats: Sequence[ProgramStats], kernel: Kernel | None = None) -> dict[str, Any]:
    """`totals(stats)` as a dict, with the closed-form `bound` (a dict) when a kernel table is given."""
    summary = totals(stats).to_dict()
    if kernel is not None:
        summary["bound"] = bound(stats, kernel).to_dict()
    return summary
