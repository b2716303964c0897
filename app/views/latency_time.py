"""Latency over time: a time × latency heatmap (log scale) with p50/p99 lines; brush to select."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt, notice, selection
from app.components.palette import HEAT_SCALE, P50_LINE, P99_LINE
from app.components.tables import REQUEST_COLUMNS
from tailscope import analysis
from tailscope.analysis import Heatmap
from tailscope.vocabulary import ALL_STAGES

E2E = "end to end"
STAGE_KEY = "time_stage"
SELECT_LIMIT = 1000


def heatmap_grid(hm: Heatmap) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """Every time bin × every latency bin between the extremes (empty ones NaN), so each brick of the
    heatmap is exactly one bin: x = time bin centres, y = log10 of latency bin centres, counts."""
    cells = hm.cells
    width = pd.Timedelta(seconds=hm.time_bin_seconds or 1.0)
    t0 = cells["time"].min()
    tb = ((cells["time"] - t0) / width).round().astype(int).to_numpy()
    lb = np.floor(np.log10(cells["latency_low_ms"].clip(lower=1e-6)) * hm.bins_per_decade + 1e-6).astype(int)
    lb = lb.to_numpy()
    grid = np.zeros((lb.max() - lb.min() + 1, tb.max() + 1))
    np.add.at(grid, (lb - lb.min(), tb), cells["count"].to_numpy(dtype=float))
    counts = np.where(grid > 0, grid, np.nan)
    times = [(t0 + width * (i + 0.5)).round("us").to_pydatetime() for i in range(counts.shape[1])]
    ys = (np.arange(lb.min(), lb.max() + 1) + 0.5) / hm.bins_per_decade
    edges = 10 ** (np.arange(lb.min(), lb.max() + 2) / hm.bins_per_decade)
    return times, ys, counts, edges


def heatmap_figure(hm: Heatmap) -> go.Figure:
    times, ys, counts, edges = heatmap_grid(hm)
    z = np.where(counts > 0, np.log10(np.where(counts > 0, counts, 1)), np.nan)
    span = np.array([f"{lo:,.2f}–{hi:,.2f} ms" for lo, hi in itertools.pairwise(edges)], dtype=object)
    custom = np.dstack([np.nan_to_num(counts), np.repeat(span[:, None], counts.shape[1], 1)])
    top = max(1.0, float(np.nanmax(z)) if np.isfinite(z).any() else 1.0)
    tick_counts = [c for c in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000) if c <= 10**top]
    fig = go.Figure(
        go.Heatmap(
            x=times,
            y=ys,
            z=z,
            customdata=custom,
            colorscale=HEAT_SCALE,
            zmin=0,
            zmax=top,
            colorbar={
                "title": {"text": "requests"},
                "tickvals": [math.log10(c) for c in tick_counts],
                "ticktext": [str(c) for c in tick_counts],
            },
            hovertemplate="%{x}<br>%{customdata[1]}<br>%{customdata[0]:.0f} requests<extra></extra>",
            hoverongaps=False,
        )
    )
    lines = hm.lines.dropna(subset=["p50_ms"])
    for column, name, color in (("p50_ms", "p50", P50_LINE), ("p99_ms", "p99", P99_LINE)):
        values = lines[column].clip(lower=1e-3)
        fig.add_trace(
            go.Scatter(
                x=lines["time"],
                y=np.log10(values),
                customdata=values,
                mode="lines+markers",
                name=name,
                line={"color": color, "width": 2},
                marker={"size": 4},
                hovertemplate=f"{name} %{{customdata:.2f}} ms at %{{x}}<extra></extra>",
            )
        )
    tickvals, ticktext = charts.log_ticks(float(edges[0]), float(edges[-1]))
    what = "end-to-end latency (log scale)" if hm.stage is None else f"{hm.stage} time (log scale)"
    charts.layout(fig, height=480, dragmode="select", xaxis_title="request start (UTC)", yaxis_title=what)
    fig.update_yaxes(tickvals=tickvals, ticktext=ticktext)
    return fig


def stage_picker() -> str | None:
    if STAGE_KEY not in st.session_state:
        wanted = st.query_params.get("stage", E2E)
        st.session_state[STAGE_KEY] = wanted if wanted in (E2E, *ALL_STAGES) else E2E
    choice = st.selectbox(
        "Latency of", [E2E, *ALL_STAGES], key=STAGE_KEY, help="End to end, or one stage's exclusive time."
    )
    filters.keep_in_url("stage", choice, E2E)
    return None if choice == E2E else choice


@st.fragment
def heatmap_panel() -> None:
    flt = filters.current()
    cols = st.columns([2, 1, 3])
    with cols[0]:
        stage = stage_picker()
    with cols[1]:
        bins = st.select_slider("Time bins", options=[20, 40, 60, 90, 120], value=60, key="time_bins")
    hm = data.get(analysis.heatmap, flt, stage=stage, time_bins=bins)
    if hm.reason or hm.cells.empty:
        notice.no_data(hm.reason or "No requests in this filter")
        return
    cols[2].caption(
        f"Each column is {fmt.seconds(hm.time_bin_seconds)} of requests; latency bins are logarithmic "
        f"({hm.bins_per_decade} per factor of 10). **Drag a box** over a region to select those requests "
        "for Tail vs body and Traces."
    )
    event = st.plotly_chart(
        heatmap_figure(hm),
        key="latency_heatmap",
        on_select="rerun",
        selection_mode=("box",),
        config=charts.CONFIG,
    )
    rect = selection.rect_from_event(event.selection if event else None)
    if rect is not None:
        selection.save(rect, stage, flt)
    chosen = selection.current(flt)
    if chosen is None:
        st.caption("No region selected yet.")
        return
    selected = data.get(analysis.select_requests, flt, chosen.rect, stage=chosen.stage, limit=SELECT_LIMIT)
    how_many = (
        fmt.count(len(selected)) if len(selected) < SELECT_LIMIT else f"{fmt.count(SELECT_LIMIT)} or more"
    )
    st.markdown(f"**Selected:** {how_many} requests, {chosen.describe()}.")
    links = st.columns([1.5, 1.3, 1, 2])
    links[0].page_link(
        "views/tail_vs_body.py", label="Compare with the rest", icon=":material/compare_arrows:"
    )
    links[1].page_link("views/traces.py", label="Open their traces", icon=":material/account_tree:")
    if links[2].button("Clear selection", icon=":material/close:"):
        selection.clear()
        st.rerun(scope="fragment")
    if not selected.empty:
        st.caption("The slowest of them:")
        st.dataframe(selected.head(200), hide_index=True, column_config=REQUEST_COLUMNS, height=320)


def render() -> None:
    st.title("Latency over time")
    st.caption(
        "When does the tail happen? Colour is the number of requests that started in a time bin with a "
        "latency in a bin; the lines are p50 and p99 per time bin."
    )
    heatmap_panel()


notice.guarded(render)
