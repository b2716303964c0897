"""The Diagnosis page's "What if" section: each fix's p50/p95/p99 predicted from the run's own trace
(`tailscope.analysis.whatif`), as a table and a bar chart of p99 per fix (hardware and capacity levers
beside software ones) against the p99 target, and one line per finding card ("fixing this: p99 X -> Y").

It runs after the findings are drawn, with a progress box, and is cached per run, store version (a rule
change is one) and what-if model version. The figure and row builders are pure (tested without
Streamlit)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt
from app.components.palette import NEUTRAL, P99_LINE, STAGE_COLORS, TARGET
from tailscope.analysis.whatif import LIMITS, WHATIF_VERSION, whatif

KIND_COLORS = {
    "measured": NEUTRAL,
    "software": STAGE_COLORS["ingress"],
    "capacity": STAGE_COLORS["queue"],
    "hardware": STAGE_COLORS["model_forward"],
}
KIND_NAMES = {
    "software": "software fix",
    "capacity": "capacity",
    "hardware": "hardware",
    "measured": "as measured",
}


def compute(store, run: str, version: int, findings: list[dict[str, Any]]) -> dict[str, Any]:
    """Cached form of the what-if (plain data): `version` is the model's, part of the cache key."""
    del version
    return whatif(store, run, findings=findings).to_dict()


def rows(result: dict[str, Any], target_ms: float | None) -> list[dict[str, Any]]:
    """One row per fix, the run as measured first."""
    out = []
    for o in [result["measured"], *result["outcomes"]]:
        out.append(
            {
                "fix": o["label"],
                "kind": KIND_NAMES.get(o["kind"], o["kind"]),
                "p50": fmt.ms(o["p50_ms"]),
                "p95": fmt.ms(o["p95_ms"]),
                "p99": fmt.ms(o["p99_ms"]),
                "p99 vs run": fmt.signed_pct(o["p99_change"], 0) if o["key"] != "measured" else "",
                "p99 vs target": fmt.signed_ms(o["p99_ms"] - target_ms) if target_ms else "",
                "how it is modelled": o["model"],
            }
        )
    return out


def figure(result: dict[str, Any], target_ms: float | None) -> go.Figure:
    """Horizontal bars: p99 after each fix, coloured by kind, with the run's p99 and the target."""
    items = [result["measured"], *sorted(result["outcomes"], key=lambda o: -o["p99_ms"])]
    fig = go.Figure()
    for kind, color in KIND_COLORS.items():
        mine = [o for o in items if o["kind"] == kind]
        if not mine:
            continue
        fig.add_trace(
            go.Bar(
                x=[o["p99_ms"] for o in mine],
                y=[o["label"] for o in mine],
                orientation="h",
                marker_color=color,
                name=KIND_NAMES[kind],
                customdata=[[o["p50_ms"], o["p95_ms"]] for o in mine],
                hovertemplate=(
                    "p99 %{x:.1f} ms (p50 %{customdata[0]:.1f}, p95 %{customdata[1]:.1f})<extra></extra>"
                ),
            )
        )
    measured = result["measured"]["p99_ms"]
    fig.add_vline(
        x=measured, line_color=P99_LINE, line_dash="dot", annotation_text=f"run p99 {fmt.ms(measured)}"
    )
    if target_ms:
        fig.add_vline(x=target_ms, line_color=TARGET, annotation_text=f"target {fmt.ms(target_ms)}")
    fig.update_yaxes(categoryorder="array", categoryarray=[o["label"] for o in items][::-1])
    charts.layout(fig, height=max(260, 46 * len(items)), xaxis_title="p99 (ms)", barmode="overlay")
    return fig


def card_line(result: dict[str, Any] | None, finding: dict[str, Any]) -> str | None:
    """The line a finding's card shows: "Fixing this: p99 X -> Y ms" (None where no fix answers it)."""
    if not result:
        return None
    entry = ((finding.get("evidence") or {}).get("stats") or {}).get("entry_point")
    if result.get("entry_point") and entry and entry != result["entry_point"]:
        return None  # a finding of another population of units than the one evaluated
    pattern, name = finding.get("pattern"), finding.get("span_name")
    hits = [o for o in result["outcomes"] if o.get("pattern") == pattern]
    named = [o for o in hits if o.get("span_name") == name] or hits
    if not named:
        return None
    best = min(named, key=lambda o: o["p99_ms"])
    before = result["measured"]["p99_ms"]
    return (
        f"**Fixing this:** p99 {fmt.ms(before)} → {fmt.ms(best['p99_ms'])} "
        f"({fmt.signed_pct(best['p99_change'], 0)}; {best['label'].lower()}, "
        "predicted from this run's timings)"
    )


def render(run: str, diagnosis: dict[str, Any], card_slots: list[Any]) -> None:
    """The section, after the findings: computed with a progress box, then each card's line filled."""
    st.subheader("What if")
    st.caption(
        "Each fix's p50/p95/p99, predicted by re-timing every request of this run with the cause removed "
        "(its critical path through the changed spans; parallel work and time no span covers kept) and, "
        "where the fix changes what the queue before the model sees, replaying the run's arrivals through "
        f"that queue with the measured service times. {LIMITS}"
    )
    with st.status("Working out what each fix is worth…", expanded=False) as box:
        try:
            result = data.get(compute, run, WHATIF_VERSION, diagnosis["findings"])
        except Exception as error:  # the diagnosis above stands; the what-if says why it is missing
            box.update(label=f"What if: not available ({type(error).__name__}: {error})", state="error")
            return
        box.update(label=f"What if: {len(result['outcomes'])} fixes evaluated", state="complete")
    if result.get("reason"):
        st.info(result["reason"], icon=":material/info:")
        return
    if result.get("entry_point"):
        what = "consumer work" if result.get("unit") == "consumer" else "requests"
        st.caption(
            f"Evaluated on the {what} of **{result['entry_point']}**, the population of units the "
            f"diagnosis reports ({fmt.count(result['requests'])} units, latency {result['latency']})."
        )
    for slot, finding in zip(card_slots, diagnosis["findings"], strict=False):
        line = card_line(result, finding)
        if slot is not None and line:
            slot.markdown(line)
    target = filters.latency_target()
    st.plotly_chart(figure(result, target), key="whatif_chart", config=charts.CONFIG)
    st.dataframe(rows(result, target), hide_index=True)
    check = result.get("model_check")
    if check:
        st.caption(
            f"The queue model replaying the run unchanged gives p99 {fmt.ms(check['p99_ms'])} against "
            f"{fmt.ms(result['measured']['p99_ms'])} measured: how close the model starts. Latency is "
            f"{result['latency']} ({fmt.count(result['requests'])} requests)."
        )
