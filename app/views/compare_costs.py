"""The Compare page's runs side by side: throughput, p99 and cost per 1,000 inferences of each run
(tailscope.analysis.run_costs), e.g. the runs of a `tailscope pipeline sweep`. Only draws."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, fmt
from tailscope import analysis
from tailscope.analysis import Filter, RunCosts

MAX_DEFAULT_RUNS = 12  # a store with more runs starts from the two compared above


def _batch(row: pd.Series) -> str | None:
    if row["max_batch"] is None or pd.isna(row["max_batch"]):
        return None
    wait = row["max_wait_ms"]
    if wait is None or pd.isna(wait):
        return str(row["max_batch"])
    return f"{row['max_batch']} / {wait} ms"


def display_table(costs: RunCosts) -> pd.DataFrame:
    """The table as shown: setup, throughput, p50/p99 and cost, with units in the column names (the
    price is in the editor above it)."""
    t = costs.table
    return pd.DataFrame(
        {
            "run": t["run"],
            "device": t["gpu"].where(t["gpu"].notna(), t["device"]),
            "dtype": t["dtype"],
            "executor": t["executor"],
            "batch": t.apply(_batch, axis=1) if len(t) else [],
            "requests": t["requests"],
            "throughput (req/s)": t["throughput_rps"].round(1),
            "p50 (ms)": t["p50_ms"].round(2),
            "p99 (ms)": t["p99_ms"].round(2),
            "cost per 1,000 inferences (USD)": t["cost_per_1k"].round(6),
        }
    )


def _bars(costs: RunCosts, column: str, title: str, text: str) -> go.Figure:
    t = costs.table.dropna(subset=[column])
    fig = go.Figure(
        go.Bar(
            x=t[column],
            y=t["run"],
            orientation="h",
            marker_color=charts.palette.TOTAL,
            text=[text.format(v) for v in t[column]],
            textposition="auto",
            hovertemplate=f"%{{y}}: %{{x:,.6g}} {title}<extra></extra>",
        )
    )
    charts.layout(fig, height=max(160, 40 + 32 * len(t)), xaxis_title=title, yaxis={"autorange": "reversed"})
    return fig


def _start_prices(runs: list[str], given: dict[str, float | None], recorded: RunCosts) -> pd.DataFrame:
    known = dict(zip(recorded.table["run"], recorded.table["price_per_hour"], strict=True))
    prices = [given.get(run) if given.get(run) is not None else known.get(run) for run in runs]
    return pd.DataFrame({"run": runs, "price (USD/h)": [None if pd.isna(p) else p for p in prices]})


def render(runs: list[str], run_a: str, run_b: str, flt: Filter, given: dict[str, float | None]) -> None:
    st.subheader("Runs side by side")
    st.caption(
        "Throughput, end-to-end p50 and p99 and the cost per 1,000 inferences of each run, e.g. the runs "
        "of a `tailscope pipeline sweep`. A run's price is the one entered here, else the one it recorded "
        "(`--price-per-hour`). Throughput is the run's requests over the time they span: at saturation, "
        "what the setup serves."
    )
    default = runs if len(runs) <= MAX_DEFAULT_RUNS else [run_a, run_b]
    chosen = st.multiselect("Runs", runs, default=default, key="compare_costs_runs")
    if not chosen:
        st.info("Choose runs to put side by side.")
        return
    recorded = data.get(analysis.run_costs, chosen, flt=flt)
    edited = st.data_editor(
        _start_prices(chosen, given, recorded),
        key="compare_costs_prices",
        hide_index=True,
        disabled=["run"],
        column_config={"price (USD/h)": st.column_config.NumberColumn(min_value=0.0, format="%.2f")},
    )
    prices = {
        run: float(price) for run, price in zip(edited["run"], edited["price (USD/h)"], strict=True)
        if price is not None and not pd.isna(price)
    }  # fmt: skip
    costs = data.get(analysis.run_costs, chosen, flt=flt, prices=prices)
    if costs.reason:
        st.info(costs.reason)
        return
    if costs.missing:
        st.caption(f"No requests match in {', '.join(costs.missing)}.")
    st.dataframe(display_table(costs), hide_index=True)
    facts = []
    if costs.fastest:
        facts.append(f"fastest: **{costs.fastest}**")
    if costs.cheapest:
        cheapest = costs.table.set_index("run").loc[costs.cheapest, "cost_per_1k"]
        facts.append(f"cheapest per inference: **{costs.cheapest}** ({fmt.usd(cheapest, 6)} per 1,000)")
    if facts:
        st.markdown("; ".join(facts))
    cols = st.columns(3)
    for col, (column, title, text) in zip(
        cols,
        (
            ("throughput_rps", "req/s", "{:,.1f}"),
            ("p99_ms", "p99 ms", "{:,.1f}"),
            ("cost_per_1k", "USD per 1,000 inferences", "{:.6f}"),
        ),
        strict=True,
    ):
        with col:
            if costs.table[column].notna().any():
                figure = _bars(costs, column, title, text)
                st.plotly_chart(figure, key=f"costs_{column}", config=charts.CONFIG)
            else:
                st.caption("Enter a price per hour to see the cost per 1,000 inferences.")
