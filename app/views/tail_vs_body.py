"""Tail vs body: what the slow (or brushed) requests have in common that the others do not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt, notice, selection
from app.components.palette import BODY, TAIL, stage_color
from tailscope import analysis
from tailscope.analysis import TailVsBody

TAIL_SHARES = {"slowest 0.1 %": 0.999, "slowest 1 %": 0.99, "slowest 5 %": 0.95, "slowest 10 %": 0.90}
TOP_ATTRIBUTES = 15
MIN_DIFFERENCE_PCT = 0.5


LABEL_CHARS = 48


def attribute_label(row: pd.Series) -> str:
    """`key=value (where)`, shortened to fit beside the chart (the hover has it whole)."""
    where = row.get("span_name") or row.get("source") or ""
    text = f"{row['key']}={row['value']}"
    suffix = f"  ({where})" if where else ""
    room = max(LABEL_CHARS - len(suffix), 16)
    if len(text) > room:
        text = text[: room - 1] + "…"
    return text + suffix


def over_represented(result: TailVsBody) -> pd.DataFrame:
    """Values more common among the selected requests than among the rest (by at least half a point)."""
    return result.attributes[result.attributes["difference_pct"] >= MIN_DIFFERENCE_PCT]


def bubbleup_figure(result: TailVsBody) -> go.Figure:
    top = over_represented(result).head(TOP_ATTRIBUTES).iloc[::-1]
    labels = [attribute_label(row) for _, row in top.iterrows()]
    full = [
        f"{row['key']}={row['value']} ({row.get('span_name') or row.get('source')})"
        for _, row in top.iterrows()
    ]
    fig = go.Figure()
    for column, name, color in (("rest_pct", "rest", BODY), ("selected_pct", "selected", TAIL)):
        fig.add_trace(
            go.Bar(
                y=labels,
                x=top[column],
                name=f"{name} requests",
                orientation="h",
                marker_color=color,
                customdata=np.column_stack([top["difference_pct"], top["lift"], full]),
                hovertemplate=(
                    f"%{{customdata[2]}}<br>{name}: %{{x:.1f}} % of requests<br>"
                    "difference %{customdata[0]:+.1f} points, lift ×%{customdata[1]:.2f}<extra></extra>"
                ),
            )
        )
    charts.layout(
        fig,
        height=max(320, 28 * len(labels) + 80),
        barmode="group",
        xaxis_title="requests carrying the value (%)",
    )
    return fig


def stages_figure(result: TailVsBody) -> go.Figure:
    stages = result.stages.sort_values("delta_ms")
    fig = go.Figure(
        go.Bar(
            y=stages["stage"],
            x=stages["delta_ms"],
            orientation="h",
            marker_color=[stage_color(s) for s in stages["stage"]],
            customdata=stages[["selected_mean_ms", "rest_mean_ms"]].to_numpy(),
            hovertemplate=(
                "%{y}: selected %{customdata[0]:.2f} ms vs rest %{customdata[1]:.2f} ms<extra></extra>"
            ),
        )
    )
    charts.layout(
        fig, height=max(300, 30 * len(stages) + 80), xaxis_title="mean exclusive time, selected − rest (ms)"
    )
    values = [float(v) for v in stages["delta_ms"]]
    return charts.bar_labels(fig, list(stages["stage"]), values, [fmt.signed_ms(v) for v in values])


def choose_selection() -> tuple[analysis.Rect | None, str | None, float, str]:
    """The selected set: the region brushed on Latency over time, or the slowest share of requests."""
    flt = filters.current()
    brushed = selection.current(flt)
    options = ["Brushed region", *TAIL_SHARES] if brushed else list(TAIL_SHARES)
    cols = st.columns([3, 2])
    choice = cols[0].radio(
        "Selected requests", options, index=0 if brushed else 1, horizontal=True, key="tail_set"
    )
    if brushed and choice == "Brushed region":
        cols[1].caption(f"Brushed on Latency over time: {brushed.describe()}.")
        return brushed.rect, brushed.stage, 0.99, choice
    cols[1].caption("Brush a region on **Latency over time** to compare exactly those requests instead.")
    return None, None, TAIL_SHARES[choice], choice


def render() -> None:
    st.title("Tail vs body")
    st.caption(
        "BubbleUp-style: every attribute value is ranked by how much more often it appears on the selected "
        "requests than on the rest. Values at the top are what the slow requests have in common."
    )
    flt = filters.current()
    rect, stage, quantile, _ = choose_selection()
    result = data.get(analysis.tail_vs_body, flt, rect=rect, tail_quantile=quantile, stage=stage)
    if result.reason:
        notice.no_data(result.reason)
        return
    cols = st.columns(3)
    cols[0].metric("Selected requests", fmt.count(result.selected_requests))
    cols[1].metric("Rest", fmt.count(result.rest_requests))
    cols[2].markdown(f"**Selection:** {result.selection}")
    left, right = st.columns([3, 2])
    with left:
        st.subheader("Over-represented attribute values")
        if over_represented(result).empty:
            st.info("No attribute value is more common among the selected requests than among the rest.")
        else:
            st.plotly_chart(bubbleup_figure(result), key="bubbleup", config=charts.CONFIG)
    with right:
        st.subheader("Stages that differ most")
        if result.stages.empty:
            st.info("No stage time to compare.")
        else:
            st.plotly_chart(stages_figure(result), key="tail_stages", config=charts.CONFIG)
    if not result.attributes.empty:
        with st.expander("All ranked attribute values"):
            st.dataframe(
                result.attributes,
                hide_index=True,
                column_config={
                    "selected_pct": st.column_config.NumberColumn("selected", format="%.1f %%"),
                    "rest_pct": st.column_config.NumberColumn("rest", format="%.1f %%"),
                    "difference_pct": st.column_config.NumberColumn("difference", format="%+.1f points"),
                    "lift": st.column_config.NumberColumn("lift", format="×%.2f"),
                },
            )


notice.guarded(render)
