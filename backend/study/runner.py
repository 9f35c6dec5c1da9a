"""The study's stages, run on this machine, producing one results document (results.json).

Stages (each timed; `results["stages"][name]["seconds"]`):
    kernel        one-forward copy of N tokens vs N decode steps, per kernel model (runtime.kernel_bench)
    ceiling       copy ceiling (coverage programs), line and token granularity, per tokenizer and corpus
    roundtrip     every oracle program rendered, parsed and resolved back to the target (text path)
    bound         closed-form wall-clock bound from each kernel table and each corpus's cost programs
    perturbation  exact match under +-1-line span noise at several rates (line coverage programs)
    replay        measured wall clock of reference replay, cad vs ar vs pld, same cases, same model
    model_mode    the model writing programs itself (no reference): validity and exact match
Derived (no extra run): losslessness through the model, boundary re-tokenisation and jump-forward
(from the replayed cad runs), measured vs bound (from the replayed programs and the model's kernel).

Corpora: humanevalpack-python, humanevalpack-js, commits, stdlib-probe, and "pooled" (sums over all).
Pooled speed-ups are ratios of summed times, never means of ratios.

Replay subset (CPU is slow on long files; a plain replay of a 3,000-token stdlib file takes minutes):
cases whose source and target each have at most `replay_max_tokens` tokens under the model's
tokenizer, in a seeded order per corpus (`--quick`: smallest first), the first `limit` of the short
corpora (HumanEvalPack) and the first `long_limit` of the long ones (commits, stdlib-probe). The chosen
ids are in results.json.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from backend.core.corpora import CORPUS_NAMES, EditCase, load_corpus

STAGES = ("kernel", "ceiling", "roundtrip", "bound", "perturbation", "replay", "model_mode")
LONG_CORPORA = ("commits", "stdlib-probe")
POOLED = "pooled"
STRATEGIES = ("cad", "ar", "pld")
RESULTS_KIND = "study-results"
FULL_KERNEL_N = (8, 16, 32, 64, 128, 256, 512)
DEFAULT_KERNEL_MODELS = ("smollm2-135m", "qwen2.5-0.5b-shape")
DEFAULT_RATES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)

Log = Callable[[str], None]


@dataclass(frozen=True)
class StudyConfig:
    """Everything that decides what the study runs. `quick()` / `full()` give the two presets."""

    model: str = "smollm2-135m"
    data_dir: str | None = None
    out: str = "study-out"
    quick: bool = False
    corpora: tuple[str, ...] = CORPUS_NAMES
    kernel_models: tuple[str, ...] = DEFAULT_KERNEL_MODELS
    kernel_n: tuple[int, ...] = FULL_KERNEL_N
    kernel_repeats: int = 3
    kernel_context: int = 512
    kernel_only: bool = False
    extra_kernels: tuple[str, ...] = ()
    tokenizers: tuple[str, ...] = ("qwen2.5",)  # the model's own vocabulary is added at run time
    ceiling_limit: int | None = None  # cases per corpus for ceiling/roundtrip/bound/perturbation; None = all
    limit: int = 10                   # replay cases per short corpus (HumanEvalPack)
    long_limit: int = 2               # replay cases per long corpus (commits, stdlib-probe)
    replay_max_tokens: int = 3000
    replay_order: str = "seeded"      # "seeded" (shuffled by seed) or "shortest" (smallest first: --quick)
    model_cases: int = 6              # model-mode sample (HumanEvalPack Python and JS, alternating)
    model_max_new_tokens: int = 384
    rates: tuple[float, ...] = DEFAULT_RATES
    seed: int = 0
    png: bool = True
    command: str = ""

    @classmethod
    def full(cls, **overrides: Any) -> "StudyConfig":
        return cls(**overrides)

    @classmethod
    def quick_preset(cls, **overrides: Any) -> "StudyConfig":
        """A few minutes on 2 cores: 2 kernel sizes of the model only, 6 ceiling cases, 2 replays per corpus."""
        base = dict(quick=True, kernel_models=(), kernel_n=(8, 32), kernel_repeats=1, kernel_context=64,
                    ceiling_limit=6, limit=2, long_limit=1, replay_max_tokens=400, replay_order="shortest", model_cases=2,
                    model_max_new_tokens=48, rates=(0.0, 0.1, 0.5, 1.0))
        base.update(overrides)
        return cls(**base)


class StudyError(RuntimeError):
    """The study cannot run (missing data, model, or a bad option); the message says what to do."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _round(value: Any, digits: int = 6) -> Any:
    """Floats rounded for a readable results.json (6 significant digits); containers recursively."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v, digits) for v in value]
    return value


def vocabulary_of(model_name: str) -> str:
    """The tokenizer family of a model: models.yaml's `vocabulary`, else a guess from the name."""
    try:
        from backend.runtime.models import get_spec

        vocabulary = get_spec(model_name).vocabulary
        if vocabulary:
            return vocabulary
    except Exception:  # an unknown name (e.g. an external kernel table): fall back to the name
        pass
    return "qwen2.5" if "qwen" in model_name.lower() else "smollm2"


# ---------------------------------------------------------------------------------------------
# The study
# ---------------------------------------------------------------------------------------------


class Study:
    """Runs the stages in order, filling `self.results`; `run()` returns it."""

    def __init__(self, config: StudyConfig, *, log: Log = _stderr) -> None:
        self.config = config
        self.log = log
        self.results: dict[str, Any] = {"kind": RESULTS_KIND, "version": 1}
        self.corpora: dict[str, list[EditCase]] = {}
        self.kernel_tables: list[dict[str, Any]] = []
        self._tokenizers: dict[str, Any] = {}
        self._loaded: Any = None
        self._ceilings: dict[str, dict[str, list[Any]]] = {}  # tokenizer -> corpus -> [CaseCeiling]

    # -- plumbing --------------------------------------------------------------------------

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.log(f"[study] {name} ...")
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started
            self.results.setdefault("stages", {})[name] = {"seconds": seconds}
            self.log(f"[study] {name} done in {seconds:.1f} s")

    def tokenizer(self, name: str) -> Any:
        if name not in self._tokenizers:
            from backend.tokenizers import load_tokenizer

            self._tokenizers[name] = load_tokenizer(name)
        return self._tokenizers[name]

    def loaded(self) -> Any:
        if self._loaded is None:
            from backend.runtime.models import load_model

            self.log(f"[study] loading {self.config.model} ...")
            self._loaded = load_model(self.config.model)
            self.results.setdefault("model", {}).update(describe_loaded(self._loaded))
        return self._loaded

    @property
    def model_vocabulary(self) -> str:
        return vocabulary_of(self.config.model)

    def tokenizer_names(self) -> list[str]:
        names = list(self.config.tokenizers)
        if self.model_vocabulary not in names:
            names.append(self.model_vocabulary)
        return names

    # -- run -------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from backend.study.machine import machine_info

        config = self.config
        started = time.perf_counter()
        self.results["config"] = asdict(config)
        self.results["command"] = config.command
        self.results["quick"] = config.quick
        self.results["machine"] = machine_info()
        self.results["model"] = {"name": config.model, "vocabulary": self.model_vocabulary}
        self.stage_kernel()
        if not config.kernel_only:
            self.load_corpora()
            self.stage_ceiling()
            self.stage_bound()
            self.stage_perturbation()
            self.stage_replay()
            self.stage_model_mode()
            self.derive_losslessness()
            self.derive_boundary()
        self.results["duration_seconds"] = time.perf_counter() - started  # run_study adds the figures' time
        return self.results

    # -- corpora ---------------------------------------------------------------------------

    def load_corpora(self) -> None:
        info = {}
        for name in self.config.corpora:
            cases = load_corpus(name, self.config.data_dir)
            self.corpora[name] = cases
            info[name] = {"cases": len(cases)}
        self.results["corpora"] = info

    def ceiling_cases(self, name: str) -> list[EditCase]:
        cases = self.corpora[name]
        limit = self.config.ceiling_limit
        return cases if limit is None else cases[:limit]

    # -- 1. kernel -------------------------------------------------------------------------

    def stage_kernel(self) -> None:
        config = self.config
        models = list(dict.fromkeys([config.model, *config.kernel_models]))
        with self.stage("kernel"):
            for name in models:
                self.log(f"[study] kernel sweep {name} n={list(config.kernel_n)} repeats={config.kernel_repeats}")
                table = measure_kernel(name, config.kernel_n, context=config.kernel_context,
                                       repeats=config.kernel_repeats,
                                       loaded=self.loaded() if name == config.model else None, log=self.log)
                table["origin"] = "measured in this run"
                self.kernel_tables.append(table)
        for path in config.extra_kernels:
            for table in read_kernel_tables(path):
                table["origin"] = f"merged from {path}"
                self.kernel_tables.append(table)
        for table in self.kernel_tables:
            annotate_kernel(table)
        self.results["kernel"] = {"tables": self.kernel_tables}

    def model_kernel(self) -> Any:
        """The KernelTable measured for the study's model in this run."""
        from backend.core.kernel import KernelTable

        for table in self.kernel_tables:
            if table.get("model") == self.config.model and table.get("origin") == "measured in this run":
                return KernelTable.from_dict(table, origin=f"kernel table of {self.config.model}")
        raise StudyError(f"no kernel table measured for {self.config.model}")

    # -- 2. ceiling + roundtrip ------------------------------------------------------------

    def stage_ceiling(self) -> None:
        from backend.core.ceiling import case_ceiling, totals

        section: dict[str, Any] = {"objective": "coverage", "tokenizers": {}}
        roundtrip: dict[str, Any] = {"tokenizers": {}}
        roundtrip_seconds = 0.0
        with self.stage("ceiling"):
            for tok_name in self.tokenizer_names():
                tokenize = self.tokenizer(tok_name)
                per_tok: dict[str, Any] = {"corpora": {}}
                trip_tok: dict[str, Any] = {"corpora": {}}
                all_stats: dict[str, list[Any]] = {"line": [], "token": []}
                self._ceilings[tok_name] = {}
                for name in self.corpora:
                    cases = self.ceiling_cases(name)
                    results, failures = [], []
                    for case in cases:
                        try:
                            results.append(case_ceiling(case, tokenize=tokenize, objectives=("coverage",)))
                        except AssertionError as error:  # the oracle's own round-trip check failed
                            failures.append({"id": case.id, "error": str(error)})
                    self._ceilings[tok_name][name] = results
                    corpus: dict[str, Any] = {"cases": len(cases)}
                    for granularity in ("line", "token"):
                        stats = [r.stats[granularity, "coverage"] for r in results]
                        all_stats[granularity] += stats
                        corpus[granularity] = totals(stats).to_dict()
                        corpus[granularity]["per_case_coverage"] = [s.coverage for s in stats]
                    per_tok["corpora"][name] = corpus
                    t0 = time.perf_counter()
                    trip_tok["corpora"][name] = roundtrip_counts(cases, results, failures, tokenize)
                    roundtrip_seconds += time.perf_counter() - t0
                per_tok["pooled"] = {g: totals(s).to_dict() for g, s in all_stats.items()}
                trip_tok["pooled"] = _sum_counts(trip_tok["corpora"].values())
                section["tokenizers"][tok_name] = per_tok
                roundtrip["tokenizers"][tok_name] = trip_tok
                self.log(f"[study] ceiling {tok_name}: line {per_tok['pooled']['line']['coverage']:.3f}, "
                         f"token {per_tok['pooled']['token']['coverage']:.3f} pooled")
            section["declaration_variant"] = self.declaration_variant()
        self.results["ceiling"] = section
        self.results["roundtrip"] = roundtrip
        self.results["stages"]["roundtrip"] = {"seconds": roundtrip_seconds, "note": "inside the ceiling stage"}

    def declaration_variant(self) -> dict[str, float | None]:
        """HumanEvalPack line coverage (qwen2.5) with the declaration prepended to source and target: a
        variant the published figure may have used; it explains part of any difference."""
        from backend.core.ceiling import case_ceiling, totals

        out: dict[str, float | None] = {}
        tokenize = self.tokenizer(self.tokenizer_names()[0])
        for name in ("humanevalpack-python", "humanevalpack-js"):
            if name not in self.corpora:
                continue
            cases = load_corpus(name, self.config.data_dir, prepend_declaration=True)
            if self.config.ceiling_limit is not None:
                cases = cases[: self.config.ceiling_limit]
            stats = [case_ceiling(c, tokenize=tokenize, granularities=("line",), objectives=("coverage",))
                     .stats["line", "coverage"] for c in cases]
            out[name] = totals(stats).coverage
        return out

    # -- 3. bound --------------------------------------------------------------------------

    def stage_bound(self, tables: Sequence[dict[str, Any]] | None = None, *, stage: str = "bound") -> None:
        """Bounds for `tables` (default: every kernel table), appended to results["bound"]["tables"]."""
        from backend.core.ceiling import bound, case_ceiling, costs_from_kernel, totals
        from backend.core.kernel import KernelTable

        section: dict[str, Any] = self.results.setdefault("bound", {"objective": "cost", "tables": []})
        with self.stage(stage):
            for table_doc in (self.kernel_tables if tables is None else tables):
                kernel = KernelTable.from_dict(table_doc, origin=table_doc["label"])
                tok_name = table_doc["tokenizer"]
                tokenize = self.tokenizer(tok_name)
                costs = costs_from_kernel(kernel)
                entry: dict[str, Any] = {"label": table_doc["label"], "model": kernel.model, "device": kernel.device,
                                         "dtype": kernel.dtype, "tokenizer": tok_name,
                                         "cost_model": asdict(costs), "corpora": {}}
                pooled: dict[str, list[Any]] = {"line": [], "token": []}
                for name in self.corpora:
                    stats: dict[str, list[Any]] = {"line": [], "token": []}
                    for case in self.ceiling_cases(name):
                        try:
                            result = case_ceiling(case, tokenize=tokenize, objectives=("cost",), costs=costs)
                        except AssertionError:
                            continue  # counted as a round-trip failure in the roundtrip section
                        for granularity in stats:
                            stats[granularity].append(result.stats[granularity, "cost"])
                    corpus = {}
                    for granularity, items in stats.items():
                        pooled[granularity] += items
                        corpus[granularity] = {**bound(items, kernel).to_dict(), **_slim_totals(totals(items))}
                    entry["corpora"][name] = corpus
                entry["pooled"] = {g: {**bound(s, kernel).to_dict(), **_slim_totals(totals(s))} for g, s in pooled.items()}
                section["tables"].append(entry)
                line = entry["pooled"]["line"]["speedup"]
                self.log(f"[study] bound {entry['label']}: line {line and round(line, 2)}x pooled")

    # -- 6. perturbation -------------------------------------------------------------------

    def stage_perturbation(self) -> None:
        from backend.core.perturb import perturbation_study

        tok_name = self.tokenizer_names()[0]
        section: dict[str, Any] = {"rates": list(self.config.rates), "seed": self.config.seed,
                                   "program": "line coverage oracle program", "corpora": {}}
        with self.stage("perturbation"):
            everything = []
            for name, results in self._ceilings[tok_name].items():
                cases = {c.id: c for c in self.ceiling_cases(name)}
                programs = [(r.case_id, cases[r.case_id].source, cases[r.case_id].target,
                             r.programs["line", "coverage"]) for r in results]
                everything += programs
                section["corpora"][name] = [r.to_dict() for r in
                                            perturbation_study(programs, self.config.rates, seed=self.config.seed)]
            section["pooled"] = [r.to_dict() for r in
                                 perturbation_study(everything, self.config.rates, seed=self.config.seed)]
        self.results["perturbation"] = section

    # -- 4. replay -------------------------------------------------------------------------

    def replay_cases(self, name: str) -> list[EditCase]:
        """The replay subset of one corpus (see the module docstring)."""
        config = self.config
        count = self.tokenizer(self.model_vocabulary).count
        eligible = [c for c in self.corpora[name]
                    if count(c.source) <= config.replay_max_tokens and count(c.target) <= config.replay_max_tokens]
        if config.replay_order == "shortest":
            eligible.sort(key=lambda c: (count(c.source) + count(c.target), c.id))
        else:
            random.Random(f"study:{config.seed}:{name}").shuffle(eligible)
        return eligible[: config.long_limit if name in LONG_CORPORA else config.limit]

    def stage_replay(self) -> None:
        from backend.core.ceiling import case_bound, program_stats
        from backend.core.program import parse_program

        kernel = self.model_kernel()
        tokenize = self.tokenizer(self.model_vocabulary)
        section: dict[str, Any] = {
            "model": self.config.model, "mode": "reference", "strategies": list(STRATEGIES),
            "limit": self.config.limit, "long_limit": self.config.long_limit,
            "replay_max_tokens": self.config.replay_max_tokens, "order": self.config.replay_order, "kernel": kernel_label(kernel.to_dict()),
            "cases": [], "corpora": {},
        }
        with self.stage("replay"):
            loaded = self.loaded()
            engine = make_engine(loaded)
            self._warm_up(engine)
            for name in self.corpora:
                chosen = self.replay_cases(name)
                for index, case in enumerate(chosen, 1):
                    record: dict[str, Any] = {"corpus": name, "id": case.id, "gold_tokens": tokenize.count(case.target),
                                              "source_tokens": tokenize.count(case.source)}
                    for strategy in STRATEGIES:
                        record[strategy] = replay_once(engine, case, strategy)
                    program = record["cad"].get("program")
                    if program and record["cad"]["exact"]:
                        ops = parse_program(program)
                        stats = program_stats(ops, case.source, case.target, tokenize=tokenize)
                        case_b = case_bound(stats, kernel)
                        record["bound"] = {**case_b.to_dict(), "copy_spans": list(stats.copy_spans),
                                           "generated_tokens": stats.generated_tokens, "tag_tokens": stats.tag_tokens}
                    record["cad"].pop("program", None)
                    section["cases"].append(record)
                    self.log(f"[study] replay {name} {index}/{len(chosen)} {case.id}: "
                             + ", ".join(f"{s} {record[s].get('wall_seconds', float('nan')):.2f}s" for s in STRATEGIES))
                section["corpora"][name] = summarize_replay([r for r in section["cases"] if r["corpus"] == name], kernel)
            section["pooled"] = summarize_replay(section["cases"], kernel)
        self.results["replay"] = section

    def _warm_up(self, engine: Any) -> None:
        """One short run per strategy before timing: first forwards are 4-10x slower (STACK.md)."""
        source = "def f(x):\n    return x + 1\n"
        target = "def f(x):\n    return x + 2\n"
        for strategy in STRATEGIES:
            run_engine(engine, source, "Change 1 to 2.", strategy=strategy, mode="reference", target=target,
                       max_new_tokens=64)

    # -- 8. model mode ---------------------------------------------------------------------

    def stage_model_mode(self) -> None:
        config = self.config
        section: dict[str, Any] = {"model": config.model, "strategy": "cad", "mode": "model",
                                   "max_new_tokens": config.model_max_new_tokens, "temperature": 0.0, "cases": []}
        with self.stage("model_mode"):
            engine = make_engine(self.loaded())
            pools = [self.corpora[n] for n in ("humanevalpack-python", "humanevalpack-js") if n in self.corpora]
            pools = pools or [self.corpora[n] for n in self.corpora]
            sample: list[tuple[str, EditCase]] = []
            rng = random.Random(f"study-model:{config.seed}")
            shuffled = [rng.sample(pool, len(pool)) for pool in pools]
            for i in range(config.model_cases):
                pool = shuffled[i % len(shuffled)]
                if i // len(shuffled) < len(pool):
                    sample.append((pool[i // len(shuffled)].language or "", pool[i // len(shuffled)]))
            for index, (_, case) in enumerate(sample, 1):
                result, seconds = run_engine(engine, case.source, case.instruction or "Fix the bug.", strategy="cad",
                                             mode="model", max_new_tokens=config.model_max_new_tokens)
                valid = result.error is None and not result.partial
                record = {"id": case.id, "valid": valid, "exact": valid and result.output == case.target,
                          "stop_reason": result.stop_reason, "error": result.error, "partial": result.partial,
                          "program": result.program, "seconds": seconds, "metrics": _plain(result.metrics.to_dict())}
                section["cases"].append(record)
                self.log(f"[study] model mode {index}/{len(sample)} {case.id}: valid={valid} exact={record['exact']}")
            cases = section["cases"]
            section["sample"] = len(cases)
            section["valid"] = sum(c["valid"] for c in cases)
            section["exact"] = sum(c["exact"] for c in cases)
            section["validity_rate"] = _ratio(section["valid"], len(cases))
            section["exact_match"] = _ratio(section["exact"], len(cases))
            section["copied_any"] = sum(bool((c["metrics"] or {}).get("tokens_copied")) for c in cases)
        self.results["model_mode"] = section

    # -- 5, 7. derived ---------------------------------------------------------------------

    def derive_losslessness(self) -> None:
        replay = self.results["replay"]
        through_model: dict[str, Any] = {}
        for name in [*self.corpora, POOLED]:
            cases = [c for c in replay["cases"] if name == POOLED or c["corpus"] == name]
            through_model[name] = {s: {"ok": sum(bool(c[s].get("exact")) for c in cases), "cases": len(cases)}
                                   for s in STRATEGIES}
        self.results["losslessness"] = {
            "resolver": self.results["roundtrip"],
            "model": {"mode": "reference", "corpora": through_model},
        }

    def derive_boundary(self) -> None:
        replay = self.results["replay"]
        section: dict[str, Any] = {"source": "replayed cad runs (reference mode)", "corpora": {}}
        for name in [*self.corpora, POOLED]:
            cases = [c for c in replay["cases"] if (name == POOLED or c["corpus"] == name) and c["cad"].get("metrics")]
            metrics = [c["cad"]["metrics"] for c in cases]
            copies = sum(int(m.get("copies", 0) or 0) for m in metrics)
            retok = sum(int(m.get("boundary_retokenized", 0) or 0) for m in metrics)
            jump = sum(int(m.get("jump_forward_tokens", 0) or 0) for m in metrics)
            tags = sum(int(m.get("tokens_tag", 0) or 0) for m in metrics)
            forwards = sum(int(m.get("forwards", 0) or 0) for m in metrics)
            section["corpora"][name] = {
                "cases": len(cases), "copies": copies, "boundary_retokenized": retok,
                "rate": _ratio(retok, copies), "jump_forward_tokens": jump, "tag_tokens": tags,
                "jump_forward_share_of_tag_tokens": _ratio(jump, tags), "forwards": forwards,
            }
        mm = self.results.get("model_mode", {}).get("cases", [])
        section["model_mode"] = {
            "cases": len(mm),
            "boundary_retokenized": sum(int((c["metrics"] or {}).get("boundary_retokenized", 0) or 0) for c in mm),
            "jump_forward_tokens": sum(int((c["metrics"] or {}).get("jump_forward_tokens", 0) or 0) for c in mm),
        }
        self.results["boundary"] = section


# ---------------------------------------------------------------------------------------------
# Stage building blocks (plain functions, also used by tests)
# ---------------------------------------------------------------------------------------------


def roundtrip_counts(cases: Sequence[EditCase], results: Sequence[Any], failures: Sequence[dict],
                     tokenize: Any) -> dict[str, Any]:
    """Render each oracle program to text, parse it back, resolve it: count exact round trips."""
    from backend.core.program import render_program
    from backend.core.resolve import resolve_program

    by_id = {c.id: c for c in cases}
    counts: dict[str, Any] = {"cases": len(cases), "failures": list(failures)}
    for granularity in ("line", "token"):
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


def _sum_counts(items: Any) -> dict[str, Any]:
    items = list(items)
    return {"cases": sum(i["cases"] for i in items),
            **{g: {"ok": sum(i[g]["ok"] for i in items), "cases": sum(i[g]["cases"] for i in items)}
               for g in ("line", "token")},
            "failures": [f for i in items for f in i["failures"]]}


def _slim_totals(t: Any) -> dict[str, Any]:
    d = t.to_dict()
    return {k: d[k] for k in ("cases", "gold_tokens", "copied_tokens", "generated_tokens", "tag_tokens",
                               "copy_spans", "coverage", "span_histogram")}


def _plain(value: Any) -> Any:
    """JSON-safe copy of a metrics dict."""
    return json.loads(json.dumps(value, default=str)) if value is not None else None


def annotate_kernel(table: dict[str, Any]) -> dict[str, Any]:
    """Add label, tokenizer family and speed-up range to a kernel-table document (in place)."""
    table["label"] = kernel_label(table)
    table["tokenizer"] = vocabulary_of(str(table.get("model", "")))
    speedups = [row.get("speedup") for row in table["rows"] if row.get("speedup")]
    table["speedup_min"] = min(speedups) if speedups else None
    table["speedup_max"] = max(speedups) if speedups else None
    return table


def kernel_label(table: dict[str, Any]) -> str:
    weights = str(table.get("weights", ""))
    timing = " (random weights, timing only)" if "random" in weights else ""
    return f"{table.get('model', '?')} {table.get('device', '?')} {table.get('dtype', '?')}{timing}"


def read_kernel_tables(path: str) -> list[dict[str, Any]]:
    """Kernel tables from a file: a kernel-table JSON, a study results.json (its kernel tables), or the
    stdout of `bench-kernel` / `study --kernel-only` (the last JSON line). Raises StudyError."""
    from backend.core.kernel import KernelError, KernelTable

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise StudyError(f"--extra-kernel {path}: cannot read ({error.strerror or error})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip().startswith("{")]
        try:
            document = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            document = None
        if document is None:
            raise StudyError(f"--extra-kernel {path}: no JSON document found") from None
    if isinstance(document, dict) and document.get("kind") == RESULTS_KIND:
        tables = [t for t in document.get("kernel", {}).get("tables", []) if t.get("origin") == "measured in this run"]
        machine = document.get("machine", {})
        for table in tables:
            table.setdefault("machine", machine)
    elif isinstance(document, dict) and isinstance(document.get("tables"), list):
        tables = document["tables"]
    else:
        tables = [document]
    checked = []
    for table in tables:
        try:
            KernelTable.from_dict(table, origin=f"--extra-kernel {path}")
        except KernelError as error:
            raise StudyError(str(error)) from None
        checked.append(dict(table))
    if not checked:
        raise StudyError(f"--extra-kernel {path}: no kernel table in it")
    return checked


def summarize_replay(cases: Sequence[dict[str, Any]], kernel: Any) -> dict[str, Any]:
    """Sums over cases and the speed-ups they give (ratios of summed seconds), with the bound for the
    same programs and a breakdown of where cad's time goes."""
    ok = [c for c in cases if all(c[s].get("wall_seconds") is not None for s in STRATEGIES)]
    out: dict[str, Any] = {"cases": len(cases), "timed_cases": len(ok)}
    if not ok:
        return out
    for strategy in STRATEGIES:
        out[strategy] = {
            "wall_seconds": sum(c[strategy]["wall_seconds"] for c in ok),
            "prefill_seconds": sum(c[strategy].get("prefill_seconds") or 0.0 for c in ok),
            "forwards": sum(c[strategy].get("forwards") or 0 for c in ok),
            "exact": sum(bool(c[strategy].get("exact")) for c in ok),
        }
        out[strategy]["end_to_end_seconds"] = out[strategy]["wall_seconds"] + out[strategy]["prefill_seconds"]
    cad, ar, pld = out["cad"]["wall_seconds"], out["ar"]["wall_seconds"], out["pld"]["wall_seconds"]
    out["speedup"] = {"cad_vs_ar": _ratio(ar, cad), "pld_vs_ar": _ratio(ar, pld), "cad_vs_pld": _ratio(pld, cad)}
    e2e = {s: out[s]["end_to_end_seconds"] for s in STRATEGIES}
    out["speedup_end_to_end"] = {"cad_vs_ar": _ratio(e2e["ar"], e2e["cad"]), "pld_vs_ar": _ratio(e2e["ar"], e2e["pld"]),
                                 "cad_vs_pld": _ratio(e2e["pld"], e2e["cad"])}
    wins = [c for c in ok if c["cad"]["wall_seconds"] < c["pld"]["wall_seconds"]]
    out["cad_faster_than_pld_cases"] = len(wins)
    bounded = [c for c in ok if c.get("bound")]
    gold = sum(c["gold_tokens"] for c in ok)
    out["gold_tokens"] = gold
    if bounded:
        plain = sum(c["bound"]["plain_seconds"] for c in bounded)
        copy = sum(c["bound"]["copy_seconds"] for c in bounded)
        measured_cad = sum(c["cad"]["wall_seconds"] for c in bounded)
        measured_ar = sum(c["ar"]["wall_seconds"] for c in bounded)
        bound_speedup = _ratio(plain, copy)
        measured_speedup = _ratio(measured_ar, measured_cad)
        step = kernel.step_seconds
        gen = sum(c["bound"]["generated_tokens"] for c in bounded)
        tag = sum(c["bound"]["tag_tokens"] for c in bounded)
        spans = [n for c in bounded for n in c["bound"]["copy_spans"]]
        cad_forwards = sum(c["cad"].get("forwards") or 0 for c in bounded)
        ar_tokens = sum(c["gold_tokens"] for c in bounded)
        def mean_prompt(strategy: str) -> float | None:
            values = [c[strategy].get("metrics", {}).get("prompt_tokens") for c in bounded]
            values = [v for v in values if v is not None]
            return statistics.mean(values) if values else None

        out["vs_bound"] = {
            "cases": len(bounded),
            "kernel_context": getattr(kernel, "context", None),
            "ar_prompt_tokens_mean": mean_prompt("ar"), "cad_prompt_tokens_mean": mean_prompt("cad"),
            "gold_tokens_mean": ar_tokens / len(bounded),
            "bound_plain_seconds": plain, "bound_copy_seconds": copy, "bound_speedup": bound_speedup,
            "measured_ar_seconds": measured_ar, "measured_cad_seconds": measured_cad,
            "measured_speedup": measured_speedup,
            "fraction_of_bound": _ratio(measured_speedup, bound_speedup),
            # Where the difference comes from (each term measured or counted, none assumed):
            "kernel_step_seconds": step,
            "measured_ar_seconds_per_token": _ratio(measured_ar, ar_tokens),
            "ar_step_vs_kernel_step": _ratio(_ratio(measured_ar, ar_tokens), step),
            "predicted_cad_decode_seconds": (gen + tag) * step,
            "predicted_cad_copy_seconds": sum(kernel.prefill_seconds(max(1, n)) for n in spans),
            "cad_vs_predicted": _ratio(measured_cad, copy),
            "ar_vs_predicted": _ratio(measured_ar, plain),
            "generated_tokens": gen, "tag_tokens": tag, "copy_spans": len(spans),
            "cad_forwards": cad_forwards,
            "cad_seconds_per_forward": _ratio(measured_cad, cad_forwards),
            "jump_forward_tokens": sum(int(c["cad"].get("metrics", {}).get("jump_forward_tokens", 0) or 0) for c in bounded),
            "boundary_retokenized": sum(int(c["cad"].get("metrics", {}).get("boundary_retokenized", 0) or 0) for c in bounded),
        }
    return out


# ---------------------------------------------------------------------------------------------
# Runtime adapters (the only place that knows the runtime's call signatures)
# ---------------------------------------------------------------------------------------------


def measure_kernel(name: str, n_values: Sequence[int], *, context: int, repeats: int, loaded: Any = None,
                   log: Log | None = None) -> dict[str, Any]:
    """A kernel table (DESIGN.md format) for model `name`, measured now (runtime.kernel_bench)."""
    from backend.runtime.kernel_bench import bench_kernel
    from backend.runtime.models import load_model

    loaded = loaded if loaded is not None else load_model(name)
    progress = (lambda line: log(f"[study]   {name} {line}")) if log else None
    return dict(bench_kernel(loaded, ns=list(n_values), context=context, repeats=repeats, progress=progress))


def describe_loaded(loaded: Any) -> dict[str, Any]:
    spec = getattr(loaded, "spec", None)
    model = getattr(loaded, "model", None)
    params = None
    try:
        params = sum(p.numel() for p in model.parameters()) if model is not None else None
    except Exception:
        pass
    return {"label": getattr(spec, "label", None), "weights": getattr(spec, "weights_label", None),
            "device": str(getattr(loaded, "device", "")), "dtype": str(getattr(loaded, "dtype", "")).replace("torch.", ""),
            "parameters": params}


def make_engine(loaded: Any) -> Any:
    from backend.runtime.engine import EditEngine

    return EditEngine(loaded)


def run_engine(engine: Any, source: str, instruction: str, *, strategy: str, mode: str, target: str | None = None,
               max_new_tokens: int) -> tuple[Any, float]:
    """Run one strategy to its result; returns (DecodeResult, wall seconds including prompt prefill)."""
    started = time.perf_counter()
    result = engine.run_to_result(source, instruction, strategy=strategy, mode=mode, target=target,
                                  max_new_tokens=max_new_tokens)
    return result, time.perf_counter() - started


def replay_once(engine: Any, case: EditCase, strategy: str) -> dict[str, Any]:
    """Reference replay of one case with one strategy: times, forwards, exactness (never raises)."""
    try:
        # reference mode ignores max_new_tokens (the target fixes every token)
        result, total = run_engine(engine, case.source, case.instruction or "Apply the edit.", strategy=strategy,
                                   mode="reference", target=case.target, max_new_tokens=512)
    except Exception as error:  # a runtime failure on one case is a result, not a crash of the study
        return {"error": f"{type(error).__name__}: {error}", "exact": False, "wall_seconds": None}
    metrics = _plain(result.metrics.to_dict()) or {}
    record = {
        "exact": result.output == case.target and result.error is None,
        "wall_seconds": metrics.get("wall_seconds"),
        "prefill_seconds": metrics.get("prefill_seconds"),
        "forwards": metrics.get("forwards"),
        "total_seconds": total,
        "stop_reason": result.stop_reason,
        "error": result.error,
        "metrics": metrics,
    }
    if strategy == "cad":
        record["program"] = result.program
    return record


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def merge_into(results: dict[str, Any], extra_kernels: Sequence[str], *, log: Log = _stderr) -> dict[str, Any]:
    """Merge extra kernel tables into an earlier run's results: add them to the kernel section and, when
    that run had corpora, compute their bounds (corpora, limits and data directory as in that run)."""
    if results.get("kind") != RESULTS_KIND:
        raise StudyError("--from-results: not a study results.json")
    known = dict(results.get("config", {}))
    fields = {f for f in StudyConfig.__dataclass_fields__}
    config = StudyConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in known.items() if k in fields})
    study = Study(config, log=log)
    study.results = results
    study.kernel_tables = results.setdefault("kernel", {"tables": []})["tables"]
    seen = {json.dumps(t.get("rows"), sort_keys=True) for t in study.kernel_tables}
    new = []
    for path in extra_kernels:
        for table in read_kernel_tables(path):
            if json.dumps(table.get("rows"), sort_keys=True) in seen:
                continue  # merged before
            table["origin"] = f"merged from {path}"
            new.append(annotate_kernel(table))
    study.kernel_tables.extend(new)
    if new and "bound" in results:
        started = time.perf_counter()
        study.load_corpora()
        study.stage_bound(new, stage="bound_merged")
        log(f"[study] merged {len(new)} kernel table(s) in {time.perf_counter() - started:.1f} s")
    results["merged_kernels"] = list(results.get("merged_kernels", [])) + list(extra_kernels)
    return results


def write_outputs(results: dict[str, Any], out: Path, *, png: bool, log: Log = _stderr,
                  count_in_duration: bool = False) -> dict[str, Any]:
    """Figures, results.json and report.md from a results document (`count_in_duration`: add the
    figures' time to the run's duration)."""
    from backend.study.figures import write_figures
    from backend.study.report import write_report

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results["figures"] = write_figures(results, out / "figures", png=png, log=log)
    results.setdefault("stages", {})["figures"] = {"seconds": time.perf_counter() - t0}
    if count_in_duration:
        results["duration_seconds"] = results.get("duration_seconds", 0.0) + results["stages"]["figures"]["seconds"]
    results = _round(results)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_report(results, out / "report.md")
    return results


def run_study(config: StudyConfig, *, log: Log = _stderr) -> dict[str, Any]:
    """Run the study and write results.json, figures and report.md under `config.out`.

    Returns the results document (also written). Raises StudyError / CorpusError / ModelUnavailable
    with a message saying what is missing.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    results = Study(config, log=log).run()
    return write_outputs(results, out, png=config.png, log=log, count_in_duration=True)
