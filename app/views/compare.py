"""Compare runs: two setups stage by stage, with bootstrap confidence intervals and cost."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt, notice
from app.views import compare_costs
from tailscope import analysis
from tailscope.analysis import Comparison, StageComparison

COLOR_A = "#4C78A8"
COLOR_B = "#F58518"


def stage_name(stage: str) -> str:
    return "end to end" if stage == "e2e" else stage


def _err(value: float | None, low: float | None, high: float | None) -> tuple[float, float]:
    if value is None:
        return 0.0, 0.0
    return (high - value if high is not None else 0.0), (value - low if low is not None else 0.0)


def quantile_figure(result: Comparison, quantile: float) -> go.Figure:
    rows = [s for s in result.stages if s.quantile == quantile and (s.a_ms is not None or s.b_ms is not None)]
    fig = go.Figure()
    for side, name, color in (("a", result.run_a, COLOR_A), ("b", result.run_b, COLOR_B)):
        values = [getattr(s, f"{side}_ms") for s in rows]
        errors = [
            _err(getattr(s, f"{side}_ms"), getattr(s, f"{side}_low_ms"), getattr(s, f"{side}_high_ms"))
            for s in rows
        ]
        fig.add_trace(
            go.Bar(
                x=[stage_name(s.stage) for s in rows],
                y=[v or 0 for v in values],
                name=name,
                marker_color=color,
                error_y={
                    "type": "data",
                    "array": [e[0] for e in errors],
                    "arrayminus": [e[1] for e in errors],
                    "thickness": 1.2,
                    "width": 4,
                },
                hovertemplate=f"{name} · %{{x}}: %{{y:.2f}} ms<extra></extra>",
            )
        )
    label = "p50" if quantile == 0.5 else f"p{100 * quantile:g}"
    charts.layout(fig, height=400, barmode="group", yaxis_title=f"{label} (ms), 95 % bootstrap interval")
    return fig


def _interval(value: float | None, low: float | None, high: float | None, signed: bool = False) -> str:
    show = fmt.signed_ms if signed else fmt.ms
    if value is None:
        return fmt.MISSING
    if low is None or high is None:
        return show(value)
    return f"{show(value)}  [{show(low)}, {show(high)}]"


def verdict(s: StageComparison) -> str:
    if s.delta_low_ms is None or s.delta_high_ms is None or s.delta_ms is None:
        return "—"
    if s.delta_low_ms > 0:
        return "B slower"
    if s.delta_high_ms < 0:
        return "B faster"
    return "no clear difference"


def delta_table(result: Comparison) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "stage": [stage_name(s.stage) for s in result.stages],
            "percentile": ["p50" if s.quantile == 0.5 else f"p{100 * s.quantile:g}" for s in result.stages],
            f"A: {result.run_a}": [_interval(s.a_ms, s.a_low_ms, s.a_high_ms) for s in result.stages],
            f"B: {result.run_b}": [_interval(s.b_ms, s.b_low_ms, s.b_high_ms) for s in result.stages],
            "B − A": [
                _interval(s.delta_ms, s.delta_low_ms, s.delta_high_ms, signed=True) for s in result.stages
            ],
            "verdict (95 %)": [verdict(s) for s in result.stages],
        }
    )


def from_url(param: str, key: str, options: list[str], default: str) -> None:
    """Seed a run picker from the URL (?a=...&b=...) so a comparison can be shared as a link."""
    if st.session_state.get(key) in options:
        return
    wanted = st.query_params.get(param)
    st.session_state[key] = wanted if wanted in options else default


def price_input(label: str, key: str, run: str) -> float | None:
    value = st.number_input(
        f"{label} price per hour (USD/h)",
        min_value=0.0,
        value=None,
        step=0.1,
        key=f"{key}:{run}",
        placeholder="e.g. 2.50",
        help="What one hour of this setup costs (instance, GPU). Used for the cost per 1,000 inferences.",
    )
    return None if value is None else float(value)


def render() -> None:
    st.title("Compare runs")
    st.caption(
        "Two runs stage by stage: p50 and p99 with 95 % bootstrap intervals, the difference B − A with its "
        "interval, throughput and cost per 1,000 inferences; and any number of runs side by side. The "
        "sidebar's service, route and time filters apply to every run."
    )
    runs = data.get(analysis.list_runs)
    if len(runs) < 2:
        notice.no_data(
            f"Comparing needs two runs; the store has {len(runs)}",
            hint="Load another run, e.g. `tailscope ingest other.jsonl --run gpu-bf16` or `tailscope demo`.",
        )
        return
    flt = filters.current()
    cols = st.columns(2)
    from_url("a", "compare_a", runs, runs[0])
    run_a = cols[0].selectbox("Run A (baseline)", runs, key="compare_a")
    others = [r for r in runs if r != run_a]
    from_url("b", "compare_b", others, others[0])
    run_b = cols[1].selectbox("Run B", others, key="compare_b")
    st.query_params["a"], st.query_params["b"] = run_a, run_b
    with cols[0]:
        price_a = price_input("Run A", "price", run_a)
    with cols[1]:
        price_b = price_input("Run B", "price", run_b)
    both = analysis.Filter(service=flt.service, route=flt.route, start=flt.start, end=flt.end)
    result = data.get(
        analysis.compare,
        run_a,
        run_b,
        flt=both,
        price_a_per_hour=price_a,
        price_b_per_hour=price_b,
    )
    if result.reason:
        notice.no_data(result.reason)
        return
    cards = st.columns(4)
    cards[0].metric(f"Throughput A ({run_a})", fmt.rps(result.a.throughput_rps))
    delta = (
        None
        if result.a.throughput_rps is None or result.b.throughput_rps is None
        else f"{result.b.throughput_rps - result.a.throughput_rps:+,.1f} req/s vs A"
    )
    cards[1].metric(f"Throughput B ({run_b})", fmt.rps(result.b.throughput_rps), delta=delta)
    cards[2].metric("Cost per 1,000 inferences, A", fmt.usd(result.a.cost_per_1k))
    cost_delta = (
        None
        if result.a.cost_per_1k is None or result.b.cost_per_1k is None
        else f"{result.b.cost_per_1k - result.a.cost_per_1k:+,.4f} USD vs A"
    )
    cards[3].metric(
        "Cost per 1,000 inferences, B", fmt.usd(result.b.cost_per_1k), delta=cost_delta, delta_color="inverse"
    )
    if result.a.cost_per_1k is None or result.b.cost_per_1k is None:
        st.caption(
            "Enter each run's hourly price to see its cost per 1,000 inferences (a run that recorded its "
            "price, `pipeline sweep --price-per-hour`, uses that one)."
        )
    compare_costs.render(runs, run_a, run_b, both, {run_a: price_a, run_b: price_b})
    st.subheader(f"{run_a} vs {run_b}, stage by stage")
    tabs = st.tabs(["p99 per stage", "p50 per stage"])
    for tab, quantile in zip(tabs, (0.99, 0.5), strict=True):
        with tab:
            st.plotly_chart(
                quantile_figure(result, quantile), key=f"compare_q{quantile}", config=charts.CONFIG
            )
    st.subheader("Differences, B − A")
    st.dataframe(delta_table(result), hide_index=True)
    st.caption(
        f"Intervals: 95 % percentile bootstrap, {result.resamples:,} resamples (seed {result.seed}). "
        "A difference is called only when its interval excludes zero."
    )
    st.subheader("Setup")
    if result.setup.empty:
        st.info("Neither run recorded setup attributes (device, dtype, batch policy ...).")
    else:
        st.dataframe(
            result.setup.sort_values("differs", ascending=False, kind="stable").rename(
                columns={"a": f"A: {run_a}", "b": f"B: {run_b}"}
            ),
            hide_index=True,
            column_config={"differs": st.column_config.CheckboxColumn("differs")},
        )


notice.guarded(render)
