"""Commands on the pure core: program, resolve, roundtrip, ceiling, perturb, probe.

Output contract: `roundtrip`, `ceiling`, `perturb` and `probe` print a readable table and, as the last
stdout line, one JSON document. `program` and `resolve` are filters: their stdout is the text itself
(the program text; the resolved file as exact UTF-8 bytes, line endings untouched, no newline added), so
they print no JSON. Bad usage or input (missing file, non-UTF-8 input, malformed program, copy out of
range, unknown corpus, malformed kernel table) exits 2 with one line on stderr. `roundtrip` exits 1 when
a program fails to round-trip.

Inputs are read as bytes and decoded as strict UTF-8 (no newline translation: CRLF and lone CR stay).
Corpora are names (humanevalpack-python, humanevalpack-js, commits, stdlib-probe) looked up in
`--data-dir` (default ../shared/data next to the repository) or paths to case-format JSONL files.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from backend.cli.common import UsageError, emit, format_table, read_text_file

if TYPE_CHECKING:
    from backend.core.cost_model import CostModel
    from backend.data.kernel import KernelTable

TOKENIZER_CHOICES = ("qwen2.5", "smollm2")


# --- shared helpers ---------------------------------------------------------------------------------

def _tokenizer(name: str):
    from backend.tokenizers import TokenizerError, load_tokenizer

    try:
        return load_tokenizer(name)
    except TokenizerError as error:
        raise UsageError(str(error)) from None


def _corpora(names: Sequence[str], data_dir: str | None, limit: int | None) -> list[tuple[str, list]]:
    from backend.data.corpora import CorpusError, load_corpus

    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be >= 1, got {limit}")
    loaded = []
    for name in names:
        try:
            cases = load_corpus(name, data_dir)
        except CorpusError as error:
            raise UsageError(str(error)) from None
        loaded.append((name, cases[:limit] if limit else cases))
    return loaded


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _granularities(choice: str) -> tuple[str, ...]:
    return ("line", "token") if choice == "both" else (choice,)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help="where named corpora live (default ../shared/data)")


def _add_corpus_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpora", nargs="+", metavar="CORPUS",
                        help="humanevalpack-python, humanevalpack-js, commits, stdlib-probe, or a .jsonl path")
    parser.add_argument("--limit", type=int, default=None, metavar="K", help="first K cases of each corpus")
    parser.add_argument("--tokenizer", choices=TOKENIZER_CHOICES, default="qwen2.5")
    _add_common(parser)


# --- program / resolve ------------------------------------------------------------------------------

def cmd_program(args: argparse.Namespace) -> int:
    """Print the oracle program turning --source into --target."""
    from backend.core.oracle import oracle_program
    from backend.core.program import render_program

    source = read_text_file(args.source, "source")
    target = read_text_file(args.target, "target")
    tokenize = _tokenizer(args.tokenizer)
    ops = oracle_program(source, target, granularity=args.granularity, objective=args.objective, tokenize=tokenize)
    sys.stdout.buffer.write(render_program(ops).encode("utf-8"))
    sys.stdout.buffer.flush()
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    """Write the text --program produces from --source, as exact bytes."""
    from backend.core.program import CopyTokens, ProgramError, parse_program
    from backend.core.resolve import ResolveError, resolve_program

    source = read_text_file(args.source, "source")
    program_text = read_text_file(args.program, "program")
    try:
        ops = parse_program(program_text)
    except ProgramError as error:
        raise UsageError(f"program {args.program}: {error}") from None
    source_tokens = None
    if any(isinstance(op, CopyTokens) for op in ops):
        source_tokens = _tokenizer(args.tokenizer).pieces(source)
    try:
        text = resolve_program(ops, source, source_tokens=source_tokens)
    except ResolveError as error:
        raise UsageError(f"program {args.program}: {error}") from None
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()
    return 0


# --- roundtrip --------------------------------------------------------------------------------------

def cmd_roundtrip(args: argparse.Namespace) -> int:
    """resolve(oracle(source, target), source) == target for every case, granularity and objective."""
    from backend.core.oracle import oracle_program
    from backend.core.resolve import resolve_program

    loaded = _corpora(args.corpora, args.data_dir, args.limit)
    tokenize = _tokenizer(args.tokenizer)
    granularities = _granularities(args.granularity)
    objectives = ("coverage", "cost") if args.objective == "both" else (args.objective,)
    rows, report = [], {}
    total_checked = total_failed = 0
    for name, cases in loaded:
        started = time.perf_counter()
        checked, failures = 0, []
        for case in cases:
            source_tokens = tokenize(case.source) if "token" in granularities else None
            for granularity in granularities:
                for objective in objectives:
                    ops = oracle_program(case.source, case.target, granularity=granularity,
                                         objective=objective, tokenize=tokenize)
                    tokens = source_tokens if granularity == "token" else None
                    checked += 1
                    if resolve_program(ops, case.source, source_tokens=tokens) != case.target:
                        failures.append(f"{case.id} ({granularity}/{objective})")
        seconds = time.perf_counter() - started
        rows.append([name, len(cases), checked, checked - len(failures), len(failures), f"{seconds:.1f}"])
        report[name] = {"cases": len(cases), "programs": checked, "ok": checked - len(failures),
                        "failed": len(failures), "failures": failures[:50], "seconds": round(seconds, 3)}
        total_checked += checked
        total_failed += len(failures)
    rows.append(["pooled", sum(len(c) for _, c in loaded), total_checked, total_checked - total_failed, total_failed, ""])
    table = format_table(["corpus", "cases", "programs", "ok", "failed", "seconds"], rows)
    emit(table, {"command": "roundtrip", "tokenizer": args.tokenizer, "granularities": list(granularities),
                 "objectives": list(objectives), "corpora": report,
                 "pooled": {"programs": total_checked, "ok": total_checked - total_failed, "failed": total_failed}})
    return 1 if total_failed else 0


# --- ceiling ----------------------------------------------------------------------------------------

def cmd_ceiling(args: argparse.Namespace) -> int:
    """Copy ceiling (coverage programs) and the closed-form wall-clock bound (cost programs = headline)."""
    from backend.measure.ceiling import (HEADLINE_OBJECTIVE, OBJECTIVES, ceiling_summary, corpus_ceilings,
                                         pooled, stats_of)

    kernel, costs = _kernel_costs(args.kernel)
    loaded = _corpora(args.corpora, args.data_dir, args.limit)
    tokenize = _tokenizer(args.tokenizer)
    granularities = _granularities(args.granularity)
    per_corpus = {name: corpus_ceilings(cases, tokenize=tokenize, granularities=granularities, costs=costs)[0]
                  for name, cases in loaded}
    groups = list(per_corpus.items())
    if len(groups) > 1:
        groups.append(("pooled", pooled(per_corpus)))

    document: dict[str, Any] = {
        "command": "ceiling", "tokenizer": args.tokenizer, "granularities": list(granularities),
        "headline_objective": HEADLINE_OBJECTIVE, "cost_model": vars(costs),
        "kernel": None if kernel is None else {"path": str(args.kernel), "model": kernel.model,
                                               "weights": kernel.weights, "device": kernel.device,
                                               "dtype": kernel.dtype, "step_seconds": kernel.step_seconds,
                                               "rows": [[r.n, r.prefill_seconds] for r in kernel.rows]},
        "corpora": {},
    }
    coverage_rows, cost_rows = [], []
    for name, results in groups:
        entry: dict[str, Any] = {}
        cover = []
        for granularity in granularities:
            entry[granularity] = {objective: ceiling_summary(stats_of(results, granularity, objective), kernel)
                                  for objective in OBJECTIVES}
            c = entry[granularity]["coverage"]
            cover += [c["copied_tokens"], _percent(c["coverage"]), c["copy_spans"]]
            h = entry[granularity]["cost"]
            speedups = ([f"{h['bound']['speedup']:.2f}x", f"{c['bound']['speedup']:.2f}x"] if kernel else [])
            cost_rows.append([name, granularity, _percent(h["coverage"]), h["generated_tokens"], h["tag_tokens"],
                              h["copy_spans"], *speedups])
        entry["cases"] = len(results)
        entry["gold_tokens"] = entry[granularities[0]]["coverage"]["gold_tokens"]
        coverage_rows.append([name, entry["cases"], entry["gold_tokens"], *cover])
        if name == "pooled":
            document["pooled"] = entry
        else:
            document["corpora"][name] = entry
    table = _ceiling_text(args, granularities, kernel is not None, coverage_rows, cost_rows)
    if args.per_case:
        document["cases"] = {name: [{"id": r.case_id, **{f"{g}/{o}": r.stats[g, o].to_dict() for g in granularities
                                                         for o in OBJECTIVES}} for r in results]
                             for name, results in per_corpus.items()}
    emit(table, document)
    return 0


def _kernel_costs(path: str | None) -> tuple[KernelTable | None, CostModel]:
    """The kernel table at `path` (if given) and the copy costs fitted to it, else the default costs;
    apart so that `cmd_ceiling` stays short and a bad table is one usage error."""
    from backend.core.cost_model import CostModel
    from backend.measure.ceiling import costs_from_kernel

    kernel = None
    costs = CostModel()
    if path:
        from backend.data.kernel import KernelError, KernelTable

        try:
            kernel = KernelTable.load(path)
            costs = costs_from_kernel(kernel)
        except (KernelError, ValueError) as error:
            raise UsageError(f"kernel table: {error}") from None
    return kernel, costs


def _ceiling_text(args: argparse.Namespace, granularities: Sequence[str], bounded: bool,
                  coverage_rows: list[list[Any]], cost_rows: list[list[Any]]) -> str:
    coverage_headers = ["corpus", "cases", "gold"]
    for granularity in granularities:
        coverage_headers += [f"{granularity} copied", f"{granularity} cov", f"{granularity} spans"]
    cost_headers = ["corpus", "unit", "cost cov", "generated", "tag", "spans"]
    if bounded:
        cost_headers += ["bound (cost)", "bound (coverage)"]
    return "\n".join([
        f"Copy ceiling, {args.tokenizer} tokens (coverage programs: most gold tokens copied)",
        format_table(coverage_headers, coverage_rows),
        "",
        "Cost programs (headline" + (f"; bound from {args.kernel}" if bounded else "; pass --kernel F for the bound") + ")",
        format_table(cost_headers, cost_rows),
    ])


# --- perturb ----------------------------------------------------------------------------------------

def cmd_perturb(args: argparse.Namespace) -> int:
    """Exact match after shifting line-copy boundaries by +-1 with probability P."""
    from backend.core.oracle import oracle_program
    from backend.measure.perturb import DEFAULT_RATES, perturbation_study

    rates = args.rate if args.rate else list(DEFAULT_RATES)
    for rate in rates:
        if not 0.0 <= rate <= 1.0:
            raise UsageError(f"--rate must be in [0, 1], got {rate}")
    loaded = _corpora(args.corpora, args.data_dir, args.limit)
    tokenize = _tokenizer(args.tokenizer)
    results, all_programs = {}, []
    for name, cases in loaded:
        programs = [(case.id, case.source, case.target,
                     oracle_program(case.source, case.target, granularity="line", objective=args.objective,
                                    tokenize=tokenize)) for case in cases]
        all_programs += [(f"{name}:{case_id}", s, t, ops) for case_id, s, t, ops in programs]
        results[name] = perturbation_study(programs, rates, seed=args.seed)
    pooled = [  # pooled = sums of the per-corpus counts (same draws as per corpus)
        {"rate": rate, "cases": sum(r[i].cases for r in results.values()), "exact": sum(r[i].exact for r in results.values()),
         "perturbed_programs": sum(r[i].perturbed_programs for r in results.values())}
        for i, rate in enumerate(rates)
    ]
    for row in pooled:
        row["exact_rate"] = row["exact"] / row["cases"] if row["cases"] else None
    headers = ["rate", *results, "pooled"]
    rows = [[f"{rate:g}", *(_percent(r[i].exact_rate) for r in results.values()), _percent(pooled[i]["exact_rate"])]
            for i, rate in enumerate(rates)]
    table = f"Exact match after +-1-line boundary shifts ({args.objective} line programs, seed {args.seed})\n"
    table += format_table(headers, rows)
    emit(table, {"command": "perturb", "seed": args.seed, "objective": args.objective, "rates": list(rates),
                 "tokenizer": args.tokenizer,
                 "corpora": {name: [r.to_dict() for r in rs] for name, rs in results.items()}, "pooled": pooled})
    return 0


# --- probe ------------------------------------------------------------------------------------------

def cmd_probe(args: argparse.Namespace) -> int:
    """Write the stdlib-probe cases (JSONL) and their manifest (JSON next to it)."""
    import json

    from backend.data.corpora import write_jsonl
    from backend.data.probe import generate_probe, probe_manifest

    if args.count < 1:
        raise UsageError(f"--count must be >= 1, got {args.count}")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: directory {out.parent} does not exist")
    cases = generate_probe(seed=args.seed, count=args.count)
    write_jsonl(cases, out)
    manifest = probe_manifest(seed=args.seed, count=args.count)
    manifest["cases_file"] = out.name
    manifest["cases_sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()
    manifest["case_ids"] = [case.id for case in cases]
    manifest_path = out.with_name(out.name.removesuffix(".jsonl") + ".manifest.json")
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    kinds = collections.Counter(case.meta["edit"]["kind"] for case in cases)
    table = format_table(["edit kind", "cases"], [[k, n] for k, n in kinds.items()])
    table += f"\n{len(cases)} cases from {len({c.meta['stdlib_file'] for c in cases})} files, Python {manifest['python_version']}"
    table += f"\nwrote {out} and {manifest_path}"
    emit(table, {"command": "probe", "out": str(out), "manifest": str(manifest_path), "cases": len(cases),
                 "seed": args.seed, "python_version": manifest["python_version"],
                 "cases_sha256": manifest["cases_sha256"], "kinds": dict(kinds)})
    return 0


# --- registration -----------------------------------------------------------------------------------

def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("program", help="print the oracle program (stdout: the program text)")
    p.add_argument("--source", required=True, metavar="F")
    p.add_argument("--target", required=True, metavar="F")
    p.add_argument("--granularity", choices=("line", "token"), default="line")
    p.add_argument("--objective", choices=("cost", "coverage"), default="cost")
    p.add_argument("--tokenizer", choices=TOKENIZER_CHOICES, default="qwen2.5")
    _add_common(p)
    p.set_defaults(handler=cmd_program)

    p = subparsers.add_parser("resolve", help="write the resolved text to stdout as exact bytes")
    p.add_argument("--source", required=True, metavar="F")
    p.add_argument("--program", required=True, metavar="F")
    p.add_argument("--tokenizer", choices=TOKENIZER_CHOICES, default="qwen2.5",
                   help="tokenization for <copy tokens=...> (loaded only when the program has one)")
    _add_common(p)
    p.set_defaults(handler=cmd_resolve)

    p = subparsers.add_parser("roundtrip", help="check resolve(oracle) == target on every case")
    _add_corpus_args(p)
    p.add_argument("--granularity", choices=("line", "token", "both"), default="both")
    p.add_argument("--objective", choices=("coverage", "cost", "both"), default="both")
    p.set_defaults(handler=cmd_roundtrip)

    p = subparsers.add_parser("ceiling", help="copy ceiling and wall-clock bound per corpus and pooled")
    _add_corpus_args(p)
    p.add_argument("--granularity", choices=("line", "token", "both"), default="both")
    p.add_argument("--kernel", default=None, metavar="F", help="kernel table JSON (bench-kernel) for the bound")
    p.add_argument("--per-case", action="store_true", help="include every case's accounting in the JSON")
    p.set_defaults(handler=cmd_ceiling)

    p = subparsers.add_parser("perturb", help="exact match after +-1-line shifts of copy boundaries")
    _add_corpus_args(p)
    p.add_argument("--rate", type=float, nargs="+", action="extend", default=None, metavar="P",
                   help="shift probabilities (default 0 0.01 0.05 0.1 0.25 0.5 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--objective", choices=("coverage", "cost"), default="coverage",
                   help="which oracle line program to perturb (default: coverage, the ceiling program)")
    p.set_defaults(handler=cmd_perturb)

    p = subparsers.add_parser("probe", help="write the stdlib-probe corpus (JSONL) and its manifest")
    p.add_argument("--out", required=True, metavar="F")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=150)
    p.set_defaults(handler=cmd_probe)
