"""Traces: the slowest requests, and one of them as a timeline with its critical path."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt, notice, selection
from app.components.palette import CRITICAL, RANK_SCALE
from app.components.tables import REQUEST_COLUMNS
from tailscope import analysis
from tailscope.analysis import Gantt

LIMIT = 50


NBSP = "\u00a0"


def span_labels(spans: pd.DataFrame) -> list[str]:
    """Indented span names, padded to one width so the right-aligned monospace ticks read as a tree;
    zero-width spaces keep repeated names apart as categories."""
    depths = spans["depth"].astype(int) - int(spans["depth"].min())
    roots = spans.loc[spans["depth"] == 0, "service"]
    home = roots.iloc[0] if len(roots) else None
    raw = [
        f"{NBSP * 2 * (depth - 1) if depth else ''}{'└' + NBSP if depth else ''}{name}"
        + (f"{NBSP}({service})" if service != home else "")
        for depth, name, service in zip(depths, spans["name"], spans["service"], strict=True)
    ]
    width = max(len(r) for r in raw)
    return [r.ljust(width, NBSP) + "\u200b" * i for i, r in enumerate(raw)]


def gantt_figure(g: Gantt) -> go.Figure:
    spans = g.spans.reset_index(drop=True)
    labels = span_labels(spans)
    ranks = spans["duration_pct_rank"].fillna(0)
    line_colors = [CRITICAL if c else "rgba(0,0,0,0.15)" for c in spans["critical"]]
    line_widths = [2.5 if c else 0.5 for c in spans["critical"]]
    custom = spans[
        ["stage", "duration_ms", "exclusive_ms", "duration_pct_rank", "service", "status"]
    ].to_numpy()
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=spans["duration_ms"].clip(lower=0.001),
            base=spans["start_offset_ms"],
            orientation="h",
            marker={
                "color": ranks,
                "colorscale": RANK_SCALE,
                "cmin": 0,
                "cmax": 100,
                "line": {"color": line_colors, "width": line_widths},
                "colorbar": {
                    "title": {"text": "rank among same-name spans", "side": "right"},
                    "ticksuffix": " %",
                },
            },
            text=[fmt.ms(v) for v in spans["duration_ms"]],
            textposition="outside",
            cliponaxis=False,
            customdata=custom,
            hovertemplate=(
                "<b>%{y}</b><br>stage %{customdata[0]} · service %{customdata[4]}<br>"
                "starts at %{base:.2f} ms, lasts %{customdata[1]:.2f} ms "
                "(exclusive %{customdata[2]:.2f} ms)<br>"
                "slower than %{customdata[3]:.0f} % of spans with this name · status %{customdata[5]}"
                "<extra></extra>"
            ),
        )
    )
    charts.layout(
        fig, height=max(300, 26 * len(spans) + 90), xaxis_title="time since the request started (ms)"
    )
    fig.update_yaxes(
        autorange="reversed", categoryorder="array", categoryarray=labels, tickfont={"family": "monospace"}
    )
    end = float((spans["start_offset_ms"] + spans["duration_ms"]).max())
    fig.update_xaxes(range=[0, 1.14 * end if end > 0 else 1.0])  # room for the labels right of the bars
    return fig


def pick_table(flt: analysis.Filter) -> pd.DataFrame:
    brushed = selection.current(flt)
    sources = ["Slowest traces", "Brushed region"] if brushed else ["Slowest traces"]
    source = st.radio("Show", sources, horizontal=True, key="traces_source") if brushed else sources[0]
    if source == "Brushed region" and brushed:
        st.caption(f"Requests brushed on Latency over time: {brushed.describe()}.")
        return data.get(analysis.select_requests, flt, brushed.rect, stage=brushed.stage, limit=LIMIT)
    return data.get(analysis.slowest_traces, flt, limit=LIMIT)


def render() -> None:
    st.title("Traces")
    flt = filters.current()
    table = pick_table(flt)
    if table.empty:
        notice.no_data("No request traces in this filter")
        return
    st.caption("Click a row to open that trace below; the slowest is open by default.")
    event = st.dataframe(
        table,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key="traces_table",
        column_config=REQUEST_COLUMNS,
        height=320,
    )
    rows = event.selection.rows if event else []
    row = table.iloc[rows[0] if rows else 0]
    run = row.get("run") if "run" in table.columns else flt.run
    gantt = data.get(analysis.trace_gantt, str(row["trace_id"]), run=run)
    st.subheader(f"Trace `{row['trace_id']}`")
    if gantt.reason or gantt.spans.empty:
        notice.no_data(gantt.reason or "This trace has no spans", hint="Pick another trace in the table.")
        return
    cols = st.columns(4)
    cols[0].metric("Duration", fmt.ms(gantt.duration_ms))
    cols[1].metric("Client-observed", fmt.ms(gantt.client_duration_ms))
    cols[2].metric("Spans", fmt.count(len(gantt.spans)))
    critical = gantt.spans[gantt.spans["critical"]]
    cols[3].metric("On the critical path", f"{fmt.count(len(critical))} spans")
    st.plotly_chart(gantt_figure(gantt), key="gantt", config=charts.CONFIG)
    st.caption(
        "Bars are coloured by how slow each span was compared with every span of the same name in the run "
        "(dark red: slower than almost all of them). A thick dark outline marks the critical path: the "
        "chain of spans that set the request's end time."
    )
    with st.expander("Spans of this trace"):
        st.dataframe(
            gantt.spans,
            hide_index=True,
            column_config={
                "start_offset_ms": st.column_config.NumberColumn("start", format="%.2f ms"),
                "duration_ms": st.column_config.NumberColumn("duration", format="%.2f ms"),
                "exclusive_ms": st.column_config.NumberColumn("exclusive", format="%.2f ms"),
                "duration_pct_rank": st.column_config.NumberColumn("rank among same name", format="%.0f %%"),
            },
        )


notice.guarded(render)
