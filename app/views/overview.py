"""Overview: how many requests, how fast, and where p50/p95/p99/p99.9 sit against the target."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt, notice
from tailscope import analysis
from tailscope.analysis import DEFAULT_LATENCY_TARGET_MS, RunSummary


def latency_target() -> float:
    """The p99 target in ms: an editable number shared by the views, kept in the URL as ?target=."""
    filters.latency_target()  # the session's value (the URL's at first) before the input shows it
    value = st.number_input(
        "p99 latency target (ms)",
        min_value=0.1,
        step=10.0,
        key=filters.TARGET_KEY,
        help="The end-to-end p99 the service should meet. Cards show how far each percentile is from it.",
    )
    filters.keep_in_url("target", f"{value:g}", f"{DEFAULT_LATENCY_TARGET_MS:g}")
    return float(value)


def verdict(run: RunSummary) -> str:
    """The short sentence under the cards."""
    parts = []
    if run.p99_ms is not None:
        gap = run.p99_ms - run.latency_target_ms
        if run.meets_target:
            parts.append(
                f"p99 is **{fmt.ms(run.p99_ms)}**, within the {fmt.ms(run.latency_target_ms)} target "
                f"({fmt.ms(-gap)} to spare)."
            )
        else:
            parts.append(
                f"p99 is **{fmt.ms(run.p99_ms)}**, over the {fmt.ms(run.latency_target_ms)} target "
                f"by {fmt.ms(gap)}."
            )
    if run.tail_stage:
        share = f" ({fmt.pct(run.tail_stage_share)} of the p99 band's excess over the median)"
        parts.append(
            f"**{run.tail_stage}** dominates the tail{share if run.tail_stage_share is not None else ''}: "
            "see the Waterfall for the whole budget."
        )
    else:
        parts.append("No stage stands out in the tail (too few requests above the median band).")
    return " ".join(parts)


def run_cards(run: RunSummary) -> None:
    cols = st.columns([1, 1, 1, 1.7])
    cols[0].metric("Requests", fmt.count(run.requests), help="Request root spans in the filter.")
    cols[1].metric("Throughput", fmt.rps(run.throughput_rps), help="Requests per second of wall time.")
    cols[2].metric("Error rate", fmt.pct(run.error_rate, 2), help=f"{fmt.count(run.errors)} failed requests.")
    cols[3].metric(
        "Tail stage",
        run.tail_stage or fmt.MISSING,
        help="The stage with the largest share of the p99 band's excess latency over the median band.",
    )
    cols = st.columns([1, 1, 1, 1.7])
    target = run.latency_target_ms
    for col, label, value in zip(
        cols,
        ("p50", "p95", "p99", "p99.9"),
        (run.p50_ms, run.p95_ms, run.p99_ms, run.p999_ms),
        strict=True,
    ):
        delta = None if value is None else f"{fmt.signed_ms(value - target)} vs target"
        col.metric(f"{label} end to end", fmt.ms(value), delta=delta, delta_color="inverse")


def percentile_chart(run: RunSummary) -> go.Figure:
    labels = ["p50", "p95", "p99", "p99.9"]
    values = [run.p50_ms, run.p95_ms, run.p99_ms, run.p999_ms]
    colors = [
        charts.palette.BODY if (v or 0) <= run.latency_target_ms else charts.palette.TAIL for v in values
    ]
    fig = go.Figure(
        go.Bar(
            x=[v or 0 for v in values],
            y=labels,
            orientation="h",
            marker_color=colors,
            text=[fmt.ms(v) for v in values],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.2f} ms<extra></extra>",
        )
    )
    fig.add_vline(
        x=run.latency_target_ms,
        line_dash="dash",
        line_color=charts.palette.TARGET,
        annotation_text=f"target {fmt.ms(run.latency_target_ms)}",
        annotation_position="top",
    )
    charts.layout(fig, height=230, xaxis_title="end-to-end latency (ms)")
    fig.update_yaxes(autorange="reversed")
    return fig


def runs_table(runs: list[RunSummary]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": [r.run for r in runs],
            "requests": [r.requests for r in runs],
            "throughput (req/s)": [r.throughput_rps for r in runs],
            "error rate (%)": [100 * r.error_rate for r in runs],
            "p50 (ms)": [r.p50_ms for r in runs],
            "p95 (ms)": [r.p95_ms for r in runs],
            "p99 (ms)": [r.p99_ms for r in runs],
            "p99.9 (ms)": [r.p999_ms for r in runs],
            "meets target": [r.meets_target for r in runs],
            "tail stage": [r.tail_stage for r in runs],
            "tail stage share (%)": [
                None if r.tail_stage_share is None else 100 * r.tail_stage_share for r in runs
            ],
        }
    )


def llm_section(flt: analysis.Filter) -> None:
    """TTFT and TPOT next to end-to-end latency, where the spans carry them (an LLM server)."""
    table = data.get(analysis.llm_latency, flt)
    if table.empty:
        return
    st.subheader("LLM latency")
    st.caption(
        "For a language model, end-to-end latency mostly follows how many tokens it writes. Time to first "
        "token (queue + prefill) and time per output token (decode) are what users feel, from the "
        "attributes the server puts on its request spans (vLLM, GenAI conventions, TGI)."
    )
    multi = table["run"].nunique() > 1
    st.dataframe(
        table if multi else table.drop(columns=["run"]),
        hide_index=True,
        key="overview_llm",
        column_config={
            "requests": st.column_config.NumberColumn("requests", format="%d"),
            **{q: st.column_config.NumberColumn(q, format="%.1f") for q in ("p50", "p90", "p99")},
        },
    )


def render() -> None:
    st.title("Overview")
    flt = filters.current()
    head = st.columns([3, 1])
    with head[1]:
        target = latency_target()
    runs_loaded = len(data.get(analysis.filter_options).get("runs", []))
    head[0].caption(
        f"{fmt.count(runs_loaded)} run{'s' if runs_loaded != 1 else ''} with requests loaded. "
        "End-to-end latency is the request root span's duration; stages split it without double counting."
    )
    result = data.get(analysis.overview, flt, latency_target_ms=target)
    if result.reason or not result.runs:
        notice.no_data(result.reason)
        return
    if len(result.runs) == 1:
        run = result.runs[0]
        st.subheader(f"Run `{run.run}`")
        run_cards(run)
        st.markdown(verdict(run))
        st.plotly_chart(percentile_chart(run), key="overview_percentiles", config=charts.CONFIG)
        if run.services:
            st.caption("Services: " + ", ".join(f"`{s}`" for s in run.services))
        llm_section(flt)
        return
    st.subheader(f"{len(result.runs)} runs")
    cols = st.columns(3)
    cols[0].metric("Runs loaded", fmt.count(runs_loaded))
    cols[1].metric("Requests", fmt.count(sum(r.requests for r in result.runs)))
    cols[2].metric(
        "Runs meeting the p99 target",
        f"{sum(1 for r in result.runs if r.meets_target)} of {len(result.runs)}",
    )
    table = runs_table(result.runs)
    event = st.dataframe(
        table,
        hide_index=True,
        key="overview_runs",
        on_select="rerun",
        selection_mode="single-row",
        height=min(36 * (len(table) + 1) + 4, 640),
        column_config={
            "throughput (req/s)": st.column_config.NumberColumn(format="%.1f req/s"),
            "error rate (%)": st.column_config.NumberColumn(format="%.2f %%"),
            **{
                c: st.column_config.NumberColumn(format="%.1f ms")
                for c in ("p50 (ms)", "p95 (ms)", "p99 (ms)", "p99.9 (ms)")
            },
            "tail stage share (%)": st.column_config.NumberColumn(format="%.1f %%"),
        },
    )
    st.caption("Click a run (or pick it in the sidebar) for its cards and the stage that dominates its tail.")
    llm_section(flt)
    rows = event.selection.rows if event else []
    if rows:
        filters.show_run_next(str(table.iloc[rows[0]]["run"]))
        st.rerun()


notice.guarded(render)
