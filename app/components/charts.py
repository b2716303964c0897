"""Plotly defaults shared by every chart: margins, fonts, log-latency ticks, modebar."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from app.components import palette

__all__ = ["CONFIG", "layout", "log_ticks", "palette"]

CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "autoScale2d"]}


def layout(fig: go.Figure, height: int = 420, **kwargs: object) -> go.Figure:
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
        hoverlabel={"namelength": -1},
        **kwargs,
    )
    return fig


def bar_labels(
    fig: go.Figure, y: list, values: list[float], texts: list[str], share: float = 0.25
) -> go.Figure:
    """Value labels of a horizontal bar chart, each just right of its bar (or of zero for a negative
    bar, so it never runs into the axis labels), with room kept for them on the right."""
    fig.add_trace(
        go.Scatter(
            y=y,
            x=[max(v, 0.0) for v in values],
            text=texts,
            mode="text",
            textposition="middle right",
            textfont={"size": 11},
            hoverinfo="skip",
            showlegend=False,
            cliponaxis=False,
        )
    )
    if len(fig.data) == 2:  # one bar trace and its labels: nothing to tell apart in a legend
        fig.update_layout(showlegend=False)
    low, high = min(0.0, *values), max(0.0, *values)
    pad = share * ((high - low) or 1.0)
    fig.update_xaxes(range=[low - 0.03 * (high - low), high + pad], zeroline=True, zerolinecolor="#888")
    fig.update_yaxes(ticklabelstandoff=6)
    return fig


def log_ticks(low_ms: float, high_ms: float) -> tuple[list[float], list[str]]:
    """Tick positions (log10 of ms) and labels (1 ms, 2 ms, 5 ms, 10 ms ...) covering [low, high]."""
    low = max(low_ms, 1e-3)
    high = max(high_ms, low * 1.01)
    values: list[float] = []
    labels: list[str] = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            v = mantissa * 10.0**exponent
            if low / 1.5 <= v <= high * 1.5:
                values.append(math.log10(v))
                labels.append(f"{v:g} ms" if v < 1000 else f"{v / 1000:g} s")
    return values, labels
