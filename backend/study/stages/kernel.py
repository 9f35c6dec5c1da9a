"""Stage 1, kernel: one-forward copy of N tokens vs N decode steps, per kernel model
(backend.measure.kernel_bench), plus kernel tables merged from files (`--extra-kernel`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from backend.study.config import MEASURED, RESULTS_KIND, Log, StudyError, vocabulary_of
from backend.study.context import StudyContext


def run(ctx: StudyContext) -> None:
    config = ctx.config
    models = list(dict.fromkeys([config.model, *config.kernel_models]))
    with ctx.stage("kernel"):
        for name in models:
            ctx.log(f"[study] kernel sweep {name} n={list(config.kernel_n)} repeats={config.kernel_repeats}")
            table = measure_kernel(name, config.kernel_n, context=config.kernel_context, repeats=config.kernel_repeats,
                                   loaded=ctx.loaded() if name == config.model else None, log=ctx.log)
            table["origin"] = MEASURED
            ctx.kernel_tables.append(table)
    for path in config.extra_kernels:
        for table in read_kernel_tables(path):
            table["origin"] = f"merged from {path}"
            ctx.kernel_tables.append(table)
    for table in ctx.kernel_tables:
        annotate_kernel(table)
    ctx.results["kernel"] = {"tables": ctx.kernel_tables}


def measure_kernel(name: str, n_values: Sequence[int], *, context: int, repeats: int, loaded: Any = None,
                   log: Log | None = None) -> dict[str, Any]:
    """A kernel table (DESIGN.md format) for model `name`, measured now."""
    from backend.measure.kernel_bench import bench_kernel
    from backend.runtime.models import load_model

    loaded = loaded if loaded is not None else load_model(name)
    progress = (lambda line: log(f"[study]   {name} {line}")) if log else None
    return dict(bench_kernel(loaded, ns=list(n_values), context=context, repeats=repeats, progress=progress))


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


def _document(path: str) -> Any:
    """The JSON document in a file: the whole file, else its last line that starts with "{"."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise StudyError(f"--extra-kernel {path}: cannot read ({error.strerror or error})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip().startswith("{")]
        try:
            document = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            document = None
        if document is None:
            raise StudyError(f"--extra-kernel {path}: no JSON document found") from None
        return document


def read_kernel_tables(path: str) -> list[dict[str, Any]]:
    """Kernel tables from a file: a kernel-table JSON, a study results.json (its kernel tables), or the
    stdout of `bench-kernel` / `study --kernel-only` (the last JSON line). Raises StudyError."""
    from backend.data.kernel import KernelError, KernelTable

    document = _document(path)
    if isinstance(document, dict) and document.get("kind") == RESULTS_KIND:
        tables = [t for t in document.get("kernel", {}).get("tables", []) if t.get("origin") == MEASURED]
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
