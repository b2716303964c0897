"""Waterfall: where the end-to-end latency of a percentile band goes, stage by stage."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt, notice
from app.components.palette import TOTAL, stage_color
from tailscope import analysis
from tailscope.analysis import BAND_QUANTILES, BANDS, Waterfall

BAND_KEY = "waterfall_band"


def band_label(band: str) -> str:
    low, high = BAND_QUANTILES[band]  # type: ignore[index]
    return f"{band} band (requests between the {100 * low:g}th and {100 * high:g}th percentile)"


def waterfall_figure(wf: Waterfall) -> go.Figure:
    """One go.Waterfall trace per stage (so each keeps its colour), then the band's total."""
    fig = go.Figure()
    running = 0.0
    stages = [s for s in wf.stages if s.mean_ms > 0]
    for bar in stages:
        fig.add_trace(
            go.Waterfall(
                name=bar.stage,
                x=[bar.stage],
                y=[bar.mean_ms],
                base=running,
                measure=["relative"],
                increasing={"marker": {"color": stage_color(bar.stage)}},
                decreasing={"marker": {"color": stage_color(bar.stage)}},
                text=[fmt.ms(bar.mean_ms)],
                textposition="outside",
                hovertemplate=f"{bar.stage}: %{{y:.2f}} ms (mean exclusive time in the band)<extra></extra>",
                showlegend=False,
            )
        )
        running += bar.mean_ms
    fig.add_trace(
        go.Waterfall(
            name="end to end",
            x=["end to end"],
            y=[wf.band_mean_ms or running],
            measure=["absolute"],
            totals={"marker": {"color": TOTAL}},
            increasing={"marker": {"color": TOTAL}},
            text=[fmt.ms(wf.band_mean_ms or running)],
            textposition="outside",
            hovertemplate="mean end-to-end latency of the band: %{y:.2f} ms<extra></extra>",
            showlegend=False,
        )
    )
    charts.layout(fig, height=440, waterfallmode="overlay", yaxis_title="mean latency in the band (ms)")
    fig.update_xaxes(categoryorder="array", categoryarray=[s.stage for s in stages] + ["end to end"])
    fig.update_yaxes(rangemode="tozero")
    return fig


def excess_figure(wf: Waterfall) -> go.Figure:
    bars = sorted(
        (s for s in wf.stages if s.tail_excess_share is not None), key=lambda s: s.tail_excess_share or 0
    )
    fig = go.Figure(
        go.Bar(
            x=[100 * (s.tail_excess_share or 0) for s in bars],
            y=[s.stage for s in bars],
            orientation="h",
            marker_color=[stage_color(s.stage) for s in bars],
            customdata=[[s.mean_ms, s.median_band_mean_ms] for s in bars],
            hovertemplate=(
                "%{y}: %{x:.1f} % of the excess<br>band mean %{customdata[0]:.2f} ms, "
                "median band %{customdata[1]:.2f} ms<extra></extra>"
            ),
        )
    )
    charts.layout(fig, height=440, xaxis_title="share of the excess (%)")
    values = [100 * (s.tail_excess_share or 0) for s in bars]
    return charts.bar_labels(
        fig, [s.stage for s in bars], values, [fmt.pct(s.tail_excess_share) for s in bars]
    )


def stage_table(wf: Waterfall) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "stage": [s.stage for s in wf.stages],
            f"{wf.band} band mean (ms)": [s.mean_ms for s in wf.stages],
            "median band mean (ms)": [s.median_band_mean_ms for s in wf.stages],
            "tail-excess share (%)": [
                None if s.tail_excess_share is None else round(100 * s.tail_excess_share, 1) + 0.0
                for s in wf.stages
            ],
            "p50 (ms)": [s.p50_ms for s in wf.stages],
            "p95 (ms)": [s.p95_ms for s in wf.stages],
            "p99 (ms)": [s.p99_ms for s in wf.stages],
            "p99.9 (ms)": [s.p999_ms for s in wf.stages],
        }
    )


MS_COLUMN = st.column_config.NumberColumn(format="%.2f ms")


@st.fragment
def band_budget() -> None:
    """The band picker and its two charts rerun on their own."""
    flt = filters.current()
    if BAND_KEY not in st.session_state:
        wanted = st.query_params.get("band", "p99")
        st.session_state[BAND_KEY] = wanted if wanted in BANDS else "p99"
    band = st.segmented_control("Percentile band", BANDS, key=BAND_KEY, help=band_label("p99"))
    band = band or "p99"
    filters.keep_in_url("band", band, "p99")
    wf = data.get(analysis.waterfall, flt, band=band)
    if wf.reason:
        notice.no_data(wf.reason)
        return
    st.markdown(
        f"**{fmt.count(wf.requests_in_band)}** of {fmt.count(wf.requests_total)} requests are in the "
        f"{band_label(band)}: end-to-end **{fmt.ms(wf.band_low_ms)} to {fmt.ms(wf.band_high_ms)}**. "
        f"Their stages add up to a mean of **{fmt.ms(wf.band_mean_ms)}** "
        f"(median band: {fmt.ms(wf.median_band_mean_ms)})."
    )
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Latency budget of the band** (mean exclusive time per stage)")
        st.plotly_chart(waterfall_figure(wf), key="waterfall_chart", config=charts.CONFIG)
    with right:
        st.markdown("**Where the tail's excess comes from**")
        if any(s.tail_excess_share is not None for s in wf.stages):
            st.plotly_chart(excess_figure(wf), key="excess_chart", config=charts.CONFIG)
        else:
            st.info(
                "The median band has no excess over itself: choose p90, p99 or p99.9 to see which stages "
                "make the tail slower than the median.",
                icon=":material/info:",
            )
    st.subheader("Per-stage percentiles")
    st.warning(
        f"{wf.note} A request's p99 is not the sum of its stages' p99s: the slowest requests are slow "
        "in some stages, not in all of them at once.",
        icon=":material/functions:",
    )
    table = stage_table(wf)
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            **{c: MS_COLUMN for c in table.columns if c.endswith("(ms)")},
            "tail-excess share (%)": st.column_config.NumberColumn(format="%.1f %%"),
        },
    )
    breakdown_section(flt, band)


def breakdown_section(flt: analysis.Filter, band: str) -> None:
    """Which spans inside each stage carry the band's time (prefill vs decode, lookup vs fallback)."""
    if band == "p50":
        return
    with st.expander("Inside the stages: which spans carry the band's time", icon=":material/account_tree:"):
        table = data.get(analysis.stage_breakdown, flt, band=band)
        if table.empty:
            st.caption("Too few requests in this band or in the median band to compare.")
            return
        st.caption(
            "Mean time per request of each span (a serving framework's phases included, e.g. prefill and "
            "decode), in this band and in the median band, from a sample of up to 500 requests of each; "
            "largest difference first."
        )
        st.dataframe(
            table.head(15),
            hide_index=True,
            column_config={
                "band_ms": st.column_config.NumberColumn(f"{band} band (ms)", format="%.2f"),
                "median_ms": st.column_config.NumberColumn("median band (ms)", format="%.2f"),
                "delta_ms": st.column_config.NumberColumn("difference (ms)", format="%.2f"),
            },
        )


def render() -> None:
    st.title("Waterfall")
    st.caption(
        "Requests are grouped into percentile bands of end-to-end latency; each bar is a stage's mean "
        "exclusive time (time no child span covers) in that band, so the bars add up to the band's mean."
    )
    band_budget()


notice.guarded(render)
