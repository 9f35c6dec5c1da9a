"""`study`: reproduce every table and figure of the copy-as-decode study on this machine.

    python -m backend study [--model M] [--data-dir D] [--out DIR] [--report-dir DIR] [--quick]
                            [--kernel-models M1,M2] [--limit K] [--long-limit K] [--kernel-only]
                            [--extra-kernel F ...] ...

Writes into --out (default `study-out`): results.json (every number, the machine, versions, model,
dtype, date, duration of each stage), figures/*.html (+ *.png when kaleido finds a Chrome) and
report.md (published figures beside ours). With --report-dir DIR (the repository uses `docs`) the
report is also written as DIR/results.md with DIR/results.json and DIR/figures/, so

    python -m backend study --report-dir docs

regenerates docs/results.md. `--quick` runs a small subset in a few minutes (CI). On a GPU:
`--kernel-only --model qwen2.5-1.5b-shape --kernel-models qwen2.5-7b-shape` measures only the kernel
sweep (bf16, CUDA events); merge its results.json into a CPU report with `--extra-kernel FILE`.

Prints the comparison table, then one JSON document (paths, duration, headline numbers) as the last
stdout line. Bad options, missing data or a missing model: exit 2 with a one-line message.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from backend.cli.common import UsageError, emit, format_table


def _models(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _runtimes(text: str) -> tuple[str, ...]:
    if text.strip() == "none":
        return ()
    names = _models(text)
    if not names or any(name not in ("llama.cpp",) for name in names):
        raise argparse.ArgumentTypeError(f"expected llama.cpp or none (torch always runs), got {text!r}")
    return names


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def _rates(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"expected rates in [0, 1] separated by commas, got {text!r}")
    return values


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("study", help="reproduce the study: results.json, figures, report.md")
    p.add_argument("--model", default=None, help="model for replay and model mode (default smollm2-135m)")
    p.add_argument("--data-dir", default=None, help="where named corpora live (default ../shared/data)")
    p.add_argument("--out", default="study-out", help="output directory (default study-out)")
    p.add_argument("--report-dir", default=None,
                   help="also write DIR/results.md, DIR/results.json, DIR/figures/ (the repository uses docs)")
    p.add_argument("--quick", action="store_true", help="small subset in a few minutes (CI)")
    p.add_argument("--kernel-models", type=_models, default=None,
                   help="comma-separated models for the kernel sweep besides --model "
                        "(default smollm2-135m,qwen2.5-0.5b-shape; --quick: none)")
    p.add_argument("--kernel-n", type=_ints, default=None, help="span lengths (default 8,16,...,512; --quick 8,32)")
    p.add_argument("--kernel-repeats", type=_positive, default=None, help="timed repeats per N (default 3; --quick 1)")
    p.add_argument("--kernel-context", type=_positive, default=None, help="context tokens before each span (default 512)")
    p.add_argument("--kernel-only", action="store_true", help="run only the kernel sweep (e.g. on a GPU machine)")
    p.add_argument("--extra-kernel", action="append", default=[], metavar="F",
                   help="merge a kernel table (bench-kernel JSON or a study results.json); repeatable")
    p.add_argument("--limit", type=_count, default=None,
                   help="replay cases per HumanEvalPack corpus (default 10; --quick 2)")
    p.add_argument("--long-limit", type=_count, default=None,
                   help="replay cases per long corpus, commits and stdlib-probe (default 2; --quick 1)")
    p.add_argument("--replay-max-tokens", type=_positive, default=None,
                   help="replay only cases whose source and target fit this many tokens (default 3000; --quick 700)")
    p.add_argument("--ceiling-limit", type=_positive, default=None,
                   help="cases per corpus for ceiling, round trip, bound, perturbation (default all; --quick 6)")
    p.add_argument("--replay-runtimes", type=_runtimes, default=None, metavar="RT,...",
                   help="replay the same cases again on these runtimes beside torch (default llama.cpp; 'none': skip)")
    p.add_argument("--model-cases", type=_count, default=None, help="model-mode sample size (default 6; --quick 2)")
    p.add_argument("--model-max-new-tokens", type=_positive, default=None, help="model-mode token cap (default 384)")
    p.add_argument("--rates", type=_rates, default=None, help="perturbation rates (default 0,0.01,0.05,0.1,0.25,0.5,1)")
    p.add_argument("--seed", type=int, default=None, help="seed for subsets and perturbation (default 0)")
    p.add_argument("--from-results", default=None, metavar="F",
                   help="no new run: re-render figures and report from an earlier results.json (with --extra-kernel: "
                        "merge those tables and compute their bounds) into --out")
    p.add_argument("--no-png", action="store_true", help="HTML figures only")
    p.set_defaults(handler=cmd_study)


_OVERRIDES = {"model": "model", "data_dir": "data_dir", "kernel_models": "kernel_models", "kernel_n": "kernel_n",
              "kernel_repeats": "kernel_repeats", "kernel_context": "kernel_context", "limit": "limit",
              "long_limit": "long_limit", "replay_max_tokens": "replay_max_tokens", "ceiling_limit": "ceiling_limit",
              "model_cases": "model_cases", "model_max_new_tokens": "model_max_new_tokens", "rates": "rates",
              "seed": "seed", "replay_runtimes": "replay_runtimes"}


def config_from_args(args: argparse.Namespace) -> Any:
    from backend.study.config import StudyConfig

    overrides: dict[str, Any] = {field: getattr(args, name) for name, field in _OVERRIDES.items()
                                 if getattr(args, name) is not None}
    for path in args.extra_kernel:
        if not Path(path).is_file():
            raise UsageError(f"--extra-kernel {path}: no such file")
    argv = sys.argv[1:] if sys.argv[1:2] == ["study"] else ["study"]  # ["study"] when called from Python
    overrides.update(out=args.out, kernel_only=args.kernel_only, extra_kernels=tuple(args.extra_kernel),
                     png=not args.no_png, command="python -m backend " + shlex.join(argv))
    return StudyConfig.quick_preset(**overrides) if args.quick else StudyConfig.full(**overrides)


def rerender(path: str, config: Any) -> dict[str, Any]:
    """Figures and report again from an earlier results.json, with extra kernel tables merged."""
    import json

    from backend.study.runner import merge_into, write_outputs

    try:
        results = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"--from-results {path}: {error}") from None
    results = merge_into(results, config.extra_kernels)
    return write_outputs(results, Path(config.out), png=config.png)


def publish(out: Path, report_dir: Path) -> None:
    """Copy the report as report_dir/results.md with results.json and figures/ beside it."""
    report_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "report.md", report_dir / "results.md")
    shutil.copyfile(out / "results.json", report_dir / "results.json")
    if (out / "figures").is_dir():
        shutil.copytree(out / "figures", report_dir / "figures", dirs_exist_ok=True)


def cmd_study(args: argparse.Namespace) -> int:
    from backend.data.corpora import CorpusError
    from backend.study.report import comparison_rows
    from backend.study.config import StudyError
    from backend.study.runner import run_study

    config = config_from_args(args)
    try:
        from backend.runtime.models import ModelUnavailable
    except ImportError as error:  # pragma: no cover - torch missing
        raise UsageError(f"the study needs the model runtime: {error}") from None
    try:
        if args.from_results:
            results = rerender(args.from_results, config)
        else:
            results = run_study(config)
    except (StudyError, CorpusError, ModelUnavailable) as error:
        raise UsageError(str(error)) from None
    out = Path(config.out)
    if args.report_dir:
        publish(out, Path(args.report_dir))
    rows = [[r[0], r[1], r[2]] for r in comparison_rows(results)]
    summary = {
        "command": "study",
        "out": str(out),
        "report": str(out / "report.md"),
        "results": str(out / "results.json"),
        "report_dir": args.report_dir,
        "quick": config.quick,
        "kernel_only": config.kernel_only,
        "duration_seconds": results.get("duration_seconds"),
        "png": results.get("figures", {}).get("png"),
        "headline": headline(results),
    }
    emit(format_table(["figure", "published", "ours"], rows), summary)
    return 0


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """A few numbers for the final JSON line (everything else is in results.json)."""
    out: dict[str, Any] = {}
    tables = results.get("kernel", {}).get("tables", [])
    out["kernel_speedup"] = {t["label"]: [t.get("speedup_min"), t.get("speedup_max")] for t in tables}
    ceiling = results.get("ceiling", {}).get("tokenizers", {})
    if ceiling:
        out["pooled_coverage"] = {k: {g: v["pooled"][g]["coverage"] for g in ("line", "token")} for k, v in ceiling.items()}
    bound = results.get("bound", {}).get("tables", [])
    if bound:
        out["pooled_bound_line"] = {b["label"]: b["pooled"]["line"]["speedup"] for b in bound}
    replay = results.get("replay", {}).get("pooled", {})
    if replay.get("speedup"):
        out["replay_speedup"] = replay["speedup"]
        out["fraction_of_bound"] = replay.get("vs_bound", {}).get("fraction_of_bound")
    mm = results.get("model_mode")
    if mm:
        out["model_mode"] = {"valid": mm["valid"], "exact": mm["exact"], "sample": mm["sample"]}
    return out
