"""Formatting for report.md and the facts the report reads from a results document (each None
when that stage did not run)."""

from __future__ import annotations

from typing import Any

CORPUS_ORDER = ("humanevalpack-python", "humanevalpack-js", "commits", "stdlib-probe")
SHORT = {"humanevalpack-python": "HEP-Py", "humanevalpack-js": "HEP-JS", "commits": "commits",
         "stdlib-probe": "stdlib-probe", "pooled": "pooled"}


# --- formatting ----------------------------------------------------------------------------------

def pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f}%"


def times(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}x" if value < 100 else f"{value:.0f}x"


def secs(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.3g} s" if value >= 0.1 else f"{value * 1000:.3g} ms"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def corpora_in(mapping: dict[str, Any]) -> list[str]:
    return [c for c in CORPUS_ORDER if c in mapping] + [c for c in mapping if c not in CORPUS_ORDER and c != "pooled"]


def ok_text(counts: dict[str, Any]) -> str:
    return f"{counts['ok']}/{counts['cases']}"


# --- facts pulled from the results (each returns None when the stage did not run) ----------------

def measured_tables(results: dict[str, Any]) -> list[dict[str, Any]]:
    return results.get("kernel", {}).get("tables", [])


def kernel_row(table: dict[str, Any], n: int) -> dict[str, Any] | None:
    return next((r for r in table["rows"] if r["n"] == n), None)


def coverage_range(results: dict[str, Any], tokenizer: str, granularity: str) -> tuple[float, float] | None:
    corpora = results.get("ceiling", {}).get("tokenizers", {}).get(tokenizer, {}).get("corpora", {})
    values = [c[granularity]["coverage"] for c in corpora.values() if c[granularity]["coverage"] is not None]
    return (min(values), max(values)) if values else None
