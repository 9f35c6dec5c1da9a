"""Plotly figures, built from plain numbers and dicts only (no service, no Gradio).

Palette: Okabe-Ito, distinguishable with the common colour-vision deficiencies; every series
also differs by line style or label, never by colour alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

COPY_COLOUR = "#0072B2"   # blue
GEN_COLOUR = "#E69F00"    # orange
TAG_COLOUR = "#CC79A7"    # reddish purple
DRAFT_COLOUR = "#009E73"  # bluish green: prompt-lookup drafts the model accepted
PLAIN_COLOUR = "#000000"  # black, dashed
STRATEGY_COLOURS = {"ar": "#D55E00", "pld": "#009E73", "cad": COPY_COLOUR}
STRATEGY_NAMES = {"ar": "plain decoding", "pld": "prompt lookup", "cad": "copy-as-decode"}

_LAYOUT = dict(
    template="plotly_white",
    margin=dict(l=50, r=20, t=40, b=45),
    height=300,
    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
    font=dict(size=12),
)


def tokens_over_time(
    timeline: Sequence[Sequence[float]], *, step_seconds: float | None, strategy: str = "cad"
) -> go.Figure:
    """Output tokens against seconds for the run, and plain decoding's estimate (one token per step)."""
    times = [float(p[0]) for p in timeline] or [0.0]
    tokens = [int(p[1]) for p in timeline] or [0]
    figure = go.Figure()
    figure.add_trace(go.Scatter(
        x=times, y=tokens, mode="lines", name=STRATEGY_NAMES.get(strategy, strategy),
        line=dict(color=STRATEGY_COLOURS.get(strategy, COPY_COLOUR), width=3, shape="hv"),
    ))
    total = tokens[-1]
    if step_seconds and total:
        figure.add_trace(go.Scatter(
            x=[0.0, step_seconds * total], y=[0, total], mode="lines",
            name=f"plain decoding (estimated, {step_seconds * 1000:.0f} ms/token)",
            line=dict(color=PLAIN_COLOUR, width=2, dash="dash"),
        ))
    figure.update_layout(title=dict(text="Tokens produced over time", font=dict(size=14)), **_LAYOUT)
    figure.update_xaxes(title_text="seconds (after prompt prefill)", rangemode="tozero")
    figure.update_yaxes(title_text="output tokens", rangemode="tozero")
    return figure


def comparison(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Wall time, forward passes and tokens/s per strategy, one panel each (their scales differ)."""
    panels = (("wall_seconds", "wall time (s)"), ("forwards", "forward passes"), ("tokens_per_second", "tokens / s"))
    figure = make_subplots(rows=1, cols=3, subplot_titles=[title for _, title in panels])
    for column, (key, _title) in enumerate(panels, start=1):
        figure.add_trace(go.Bar(
            x=[r.get("label") or STRATEGY_NAMES.get(r["strategy"], r["strategy"]) for r in rows],
            y=[float(r.get(key) or 0.0) for r in rows],
            marker_color=[STRATEGY_COLOURS.get(r["strategy"], "#999999") for r in rows],
            text=[_short(r.get(key)) for r in rows], textposition="auto",
            showlegend=False,
        ), row=1, col=column)
    figure.update_layout(**{**_LAYOUT, "height": 320})
    return figure


def _short(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)
