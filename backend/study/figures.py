"""The study's figures, drawn from the results document only (plain dicts in, plotly figures out).

Figures: speed-up vs N (kernel), span-length histograms, coverage per corpus, bound vs measured,
perturbation curve. Each is written as HTML (plotly.js beside it in `plotly.min.js`, so the pages work
offline) and as PNG through kaleido when a Chrome/Chromium is available (kaleido 1.x drives the browser
found by choreographer: $BROWSER_PATH, else `chromium`/`google-chrome` on PATH; Debian:
`apt-get install chromium`). Without one, HTML only, and the reason is recorded.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

PUBLISHED_COLOR = "#888888"
WIDTH, HEIGHT = 1000, 620
CORPUS_ORDER = ("humanevalpack-python", "humanevalpack-js", "commits", "stdlib-probe", "pooled")
SHORT = {"humanevalpack-python": "HEP-Python", "humanevalpack-js": "HEP-JS", "commits": "commits",
         "stdlib-probe": "stdlib-probe", "pooled": "pooled"}
COLORS = {"humanevalpack-python": "#1f77b4", "humanevalpack-js": "#ff7f0e", "commits": "#2ca02c",
          "stdlib-probe": "#9467bd", "pooled": "#111111"}


def _short(names: list[str]) -> list[str]:
    return [SHORT.get(n, n) for n in names]


def _log_range(values: list[Any]) -> list[float] | None:
    """A log-axis range (in log10 units) around the positive values, with some headroom."""
    import math

    positive = [v for v in values if isinstance(v, (int, float)) and v > 0]
    if not positive:
        return None
    return [math.log10(min(positive)) - 0.15, math.log10(max(positive)) + 0.25]


def _go() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as error:  # pragma: no cover - plotly is pinned in requirements.txt
        raise RuntimeError("plotly is not installed (pip install plotly==7.1.0)") from error
    return go


def _layout(fig: Any, title: str, x: str, y: str, **extra: Any) -> Any:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", width=WIDTH, height=HEIGHT,
                      margin=dict(b=190), legend=dict(orientation="h", y=-0.25, yanchor="top"), **extra)
    return fig


def _corpora(mapping: dict[str, Any]) -> list[str]:
    return [c for c in CORPUS_ORDER if c in mapping] + [c for c in mapping if c not in CORPUS_ORDER]


def kernel_figure(results: dict[str, Any]) -> Any | None:
    go = _go()
    tables = results.get("kernel", {}).get("tables", [])
    if not tables:
        return None
    fig = go.Figure()
    for table in tables:
        rows = [r for r in table["rows"] if r.get("speedup")]
        fig.add_trace(go.Scatter(x=[r["n"] for r in rows], y=[r["speedup"] for r in rows], mode="lines+markers",
                                 name=f"{table['label']} [{table.get('origin', '')}]"))
    published = results.get("published", {}).get("kernel_speedup")
    if published:
        low, high = published["n_range"]
        fig.add_trace(go.Scatter(x=[low, high], y=[published["low"], published["high"]], mode="markers",
                                 marker=dict(symbol="x", size=12, color=PUBLISHED_COLOR),
                                 name="published range endpoints (A100 bf16, Qwen2.5-1.5B/7B)"))
    fig.update_xaxes(type="log", dtick=0.30103)
    fig.update_yaxes(type="log", dtick=1)
    return _layout(fig, "Copy kernel: one forward of N tokens vs N decode steps", "N (tokens copied)",
                   "speed-up (N steps / one forward)")


def histogram_figure(results: dict[str, Any]) -> Any | None:
    go = _go()
    ceiling = results.get("ceiling", {}).get("tokenizers", {})
    if not ceiling:
        return None
    tok_name = next(iter(ceiling))
    corpora = ceiling[tok_name]["corpora"]
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("line copies", "token copies"))
    for col, granularity in enumerate(("line", "token"), 1):
        for name in _corpora(corpora):
            hist = corpora[name][granularity]["span_histogram"]
            total = sum(hist.values()) or 1
            fig.add_trace(go.Bar(x=list(hist), y=[v / total for v in hist.values()], name=SHORT.get(name, name),
                                 marker_color=COLORS.get(name), legendgroup=name, showlegend=col == 1), row=1, col=col)
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="span length (tokens)")
    return _layout(fig, f"Copy span lengths (coverage programs, {tok_name} tokens): share of spans per bucket",
                   "span length (tokens)", "share of spans")


def coverage_figure(results: dict[str, Any]) -> Any | None:
    go = _go()
    ceiling = results.get("ceiling", {}).get("tokenizers", {})
    if not ceiling:
        return None
    fig = go.Figure()
    for tok_name, section in ceiling.items():
        names = _corpora(section["corpora"]) + ["pooled"]
        for granularity in ("line", "token"):
            values = [(section["pooled"] if n == "pooled" else section["corpora"][n])[granularity]["coverage"]
                      for n in names]
            fig.add_trace(go.Bar(x=_short(names), y=values, name=f"{granularity} copies, {tok_name}"))
    published = results.get("published", {})
    for key, label, where in (("line_coverage", "published line-copy range", "bottom left"),
                              ("token_coverage", "published token-copy range", "top right")):
        if key in published:
            low, high = published[key]["low"], published[key]["high"]
            fig.add_hrect(y0=low, y1=high, fillcolor=PUBLISHED_COLOR, opacity=0.12, line_width=0,
                          annotation_text=f"{label} {100 * low:.0f}-{100 * high:.0f}%", annotation_position=where)
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%")
    return _layout(fig, "Copy ceiling: share of gold tokens reachable by copies", "corpus", "coverage")


def bound_figure(results: dict[str, Any]) -> Any | None:
    go = _go()
    bound = results.get("bound", {}).get("tables", [])
    replay = results.get("replay", {}).get("corpora", {})
    if not bound and not replay:
        return None
    fig = go.Figure()
    values: list[Any] = []

    def bars(names: list[str], ys: list[Any], name: str) -> None:
        values.extend(ys)
        fig.add_trace(go.Bar(x=_short(names), y=ys, name=name))

    for table in bound:
        names = _corpora(table["corpora"]) + ["pooled"]
        bars(names, [(table["pooled"] if n == "pooled" else table["corpora"][n])["line"]["speedup"] for n in names],
             f"closed-form bound, whole corpus, {table['label']}")
    if replay:
        summary = dict(replay)
        summary["pooled"] = results["replay"].get("pooled", {})
        names = [n for n in _corpora(summary) if summary[n].get("vs_bound")]
        bars(names, [summary[n]["vs_bound"]["bound_speedup"] for n in names], "bound for the replayed cases (model kernel)")
        names = [n for n in _corpora(summary) if summary[n].get("speedup")]
        bars(names, [summary[n]["speedup"]["cad_vs_ar"] for n in names], "measured: copy-as-decode vs plain")
        bars(names, [summary[n]["speedup"]["pld_vs_ar"] for n in names], "measured: prompt lookup vs plain")
    published = results.get("published", {}).get("bound")
    if published and fig.data:
        values.append(published["pooled"])
        categories = list(dict.fromkeys(x for trace in fig.data for x in trace.x))
        fig.add_trace(go.Scatter(x=categories, y=[published["pooled"]] * len(categories), mode="lines",
                                 line=dict(dash="dash", color=PUBLISHED_COLOR),
                                 name=f"published pooled bound {published['pooled']:g}x (A100, Qwen2.5)"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(type="log", range=_log_range(values))
    return _layout(fig, "Wall-clock speed-up over plain decoding: closed-form bound vs measured replay",
                   "corpus", "speed-up (x)")


def perturbation_figure(results: dict[str, Any]) -> Any | None:
    go = _go()
    section = results.get("perturbation")
    if not section:
        return None
    fig = go.Figure()
    series = dict(section["corpora"])
    series["pooled"] = section["pooled"]
    for name in _corpora(series):
        rows = series[name]
        fig.add_trace(go.Scatter(x=[r["rate"] for r in rows], y=[r["exact_rate"] for r in rows],
                                 mode="lines+markers", name=SHORT.get(name, name),
                                 line=dict(width=4 if name == "pooled" else 2, color=COLORS.get(name))))
    published = results.get("published", {}).get("perturbation")
    if published:
        fig.add_hline(y=published["noisy"], line_dash="dash", line_color=PUBLISHED_COLOR,
                      annotation_text=f"published: {published['noisy']:.1%} under off-by-one noise")
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%")
    return _layout(fig, "Exact match when copy boundaries shift by one line with probability p",
                   "p (per boundary)", "exact match")


FIGURES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "kernel_speedup": kernel_figure,
    "span_histograms": histogram_figure,
    "coverage": coverage_figure,
    "bound_vs_measured": bound_figure,
    "perturbation": perturbation_figure,
}


def _ensure_browser() -> str | None:
    """The Chrome kaleido will use, pointing $BROWSER_PATH at Debian's chromium when nothing else is set."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    if Path("/usr/bin/chromium").exists():
        os.environ["BROWSER_PATH"] = "/usr/bin/chromium"
        return "/usr/bin/chromium"
    return None


def write_figures(results: dict[str, Any], directory: Path, *, png: bool = True,
                  log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Write every figure the results allow; returns {"files": {name: {"html", "png"}}, "png": ..., ...}."""
    from backend.study.published import PUBLISHED

    results = {**results, "published": PUBLISHED}
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, str | None]] = {}
    summary: dict[str, Any] = {"files": files, "png": False, "png_error": None, "browser": None}
    try:
        figures = {name: build(results) for name, build in FIGURES.items()}
    except (ImportError, RuntimeError) as error:  # e.g. the GPU image has no plotly: numbers and report still count
        summary["error"] = summary["png_error"] = f"no figures: {error}"
        log(f"[study] {summary['error']}")
        return summary
    figures = {name: fig for name, fig in figures.items() if fig is not None}
    for name, fig in figures.items():
        html = directory / f"{name}.html"
        fig.write_html(str(html), include_plotlyjs="directory", full_html=True)
        files[name] = {"html": f"figures/{html.name}", "png": None}
    if not figures:
        return summary
    if not png:
        summary["png_error"] = "PNG export switched off (--no-png)"
        return summary
    browser = _ensure_browser()
    summary["browser"] = browser
    if browser is None:
        summary["png_error"] = "no Chrome/Chromium found for kaleido (install chromium or set BROWSER_PATH)"
        log(f"[study] PNG unavailable: {summary['png_error']}")
        return summary
    try:
        import plotly.io as pio

        names = list(figures)
        pio.write_images([figures[n] for n in names], [str(directory / f"{n}.png") for n in names],
                         width=WIDTH, height=HEIGHT, scale=1.5)
        for name in names:
            files[name]["png"] = f"figures/{name}.png"
        summary["png"] = True
    except Exception as error:  # kaleido/browser failures must not lose the study's numbers
        summary["png_error"] = f"{type(error).__name__}: {error}"[:500]
        log(f"[study] PNG export failed: {summary['png_error']}")
    return summary
