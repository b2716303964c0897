"""Diagnosis: the causes of the run's latency tail, each with its evidence chart and what to change.

Every number comes from `tailscope.analysis.diagnosis` (pure functions over the run's spans); the
figure builders here turn a finding's `evidence["chart"]` data into a Plotly figure and are pure too.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from app.components import charts, data, filters, fmt, notice
from app.components.palette import BODY, NEUTRAL, P99_LINE, TAIL, TOTAL
from app.views import diagnosis_mechanisms as mechanisms
from app.views import whatif_section
from app.views.diagnosis_shares import population_note, share_rows, shares_figure
from tailscope.analysis.diagnosis import Diagnosis, diagnose, list_runs, run_version

TITLES = {
    "gc_pause": "GC pauses stall every in-flight request",
    "lock_contention": "Lock contention",
    "queueing": "Queueing under load",
    "cache_miss": "Cache misses",
    "cold_start": "Cold start",
    "slow_dependency": "Slow dependency",
    "network": "Network between client and server",
    "compute_bound": "The model's forward pass",
    "unexplained_tail": "Where the rest of the tail goes (no recognised mechanism)",
    **mechanisms.TITLES,
}
CHART_TITLES = {
    "stall_timeline": "Stall timeline: the leaf spans of requests on one instance around the longest stall",
    "wait_vs_concurrency": "Duration vs requests already in the span, with the fitted hold time",
    "arrival_vs_wait": "Arrival rate and wait before work, over time",
    "log_duration_histogram": "Duration histogram (log scale) with its two modes",
    "warmup_curve": "Median latency by request index of the instance (warm-up curve)",
    "dependency_tail_share": "The dependency's quantiles against end-to-end latency's",
    "network_gap": "Client-observed minus server-observed time per call",
    "forward_vs_batch": "Forward time vs batch size, with the fitted line",
    "tail_excess_by_span": "Share of the tail excess per span (in red: what no mechanism explains)",
    **mechanisms.CHART_TITLES,
}


def _stall_timeline(c: dict[str, Any]) -> go.Figure:
    fig = go.Figure()
    for slow, color, label in ((False, BODY, "span"), (True, TAIL, "slow span (above p90 of its name)")):
        idx = [i for i, s in enumerate(c["slow"]) if bool(s) == slow]
        if not idx:
            continue
        fig.add_trace(
            go.Bar(
                x=[c["end_ms"][i] - c["start_ms"][i] for i in idx],
                base=[c["start_ms"][i] for i in idx],
                y=[c["row"][i] for i in idx],
                orientation="h",
                marker_color=color,
                name=label,
                customdata=[c["name"][i] for i in idx],
                hovertemplate="%{customdata}: %{x:.2f} ms<extra></extra>",
            )
        )
    for lo, hi in c.get("stalls_ms", []):
        fig.add_vrect(x0=lo, x1=hi, fillcolor=TAIL, opacity=0.10, line_width=0)
    lo, hi = c["stall_ms"]
    fig.add_vrect(x0=lo, x1=hi, fillcolor=TAIL, opacity=0.12, line_width=0, annotation_text="longest stall")
    charts.layout(fig, height=380, barmode="overlay", xaxis_title="time (ms)", yaxis_title="request")
    return fig


def _points_and_fit(
    c: dict[str, Any], x: str, y: str, points: str, color: str, fit: str, empty_top: float = 0
) -> go.Figure:
    """The chart's points (c[x], c[y]) and its fitted line intercept_ms + slope_ms * x from 0 to the
    largest x (`empty_top` without points)."""
    top = max(c[x], default=empty_top)
    fig = go.Figure(
        go.Scatter(x=c[x], y=c[y], mode="markers", marker={"color": BODY, "opacity": 0.35}, name=points)
    )
    fig.add_trace(
        go.Scatter(
            x=[0, top],
            y=[c["intercept_ms"], c["intercept_ms"] + c["slope_ms"] * top],
            mode="lines",
            line={"color": color, "width": 3},
            name=fit,
        )
    )
    return fig


def _wait_vs_concurrency(c: dict[str, Any]) -> go.Figure:
    fit = f"fit: {fmt.ms(c['slope_ms'])} per request ahead"
    fig = _points_and_fit(c, "concurrency", "duration_ms", "span", TAIL, fit)
    charts.layout(
        fig, height=360, xaxis_title="requests already in the span (same instance)", yaxis_title="ms"
    )
    return fig


def _arrival_vs_wait(c: dict[str, Any]) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=c["time_s"], y=c["arrival_rps"], name="arrivals (req/s)", line={"color": NEUTRAL})
    )
    fig.add_trace(
        go.Scatter(
            x=c["time_s"], y=c["mean_wait_ms"], name="mean wait (ms)", line={"color": TAIL}, yaxis="y2"
        )
    )
    charts.layout(
        fig,
        height=360,
        xaxis_title=f"time since start (s); wait lags arrivals by {fmt.ms(c['lag_ms'])}",
        yaxis={"title": "arrivals (req/s)"},
        yaxis2={"title": "mean wait (ms)", "overlaying": "y", "side": "right"},
    )
    return fig


def _histogram(c: dict[str, Any]) -> go.Figure:
    xs = [10**v for v in c["log10_ms"]]
    fig = go.Figure(go.Bar(x=xs, y=c["count"], marker_color=BODY, name="spans"))
    for label, value, color in (
        ("fast mode", c["modes_ms"][0], BODY),
        ("slow mode", c["modes_ms"][1], TAIL),
        ("split", c["threshold_ms"], TOTAL),
    ):
        fig.add_vline(x=value, line_color=color, line_dash="dot", annotation_text=f"{label} {fmt.ms(value)}")
    charts.layout(fig, height=360, xaxis_title="duration (ms, log scale)", yaxis_title="spans", bargap=0)
    fig.update_xaxes(type="log", dtick=1)
    return fig


def _warmup(c: dict[str, Any]) -> go.Figure:
    xs = [max(i, 0) + 1 for i in c["request_index"]]
    fig = go.Figure(
        go.Scatter(x=xs, y=c["median_ms"], mode="lines+markers", line={"color": TAIL}, name="median")
    )
    fig.add_hline(y=c["warm_median_ms"], line_color=BODY, line_dash="dot", annotation_text="warm")
    charts.layout(
        fig, height=360, xaxis_title="request number on its instance (log)", yaxis_title="median ms"
    )
    fig.update_xaxes(type="log", dtick=1)
    return fig


def _dependency(c: dict[str, Any]) -> go.Figure:
    labels = [f"p{100 * q:g}" for q in c["quantiles"]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=c["latency_ms"], name="end-to-end latency", marker_color=NEUTRAL))
    fig.add_trace(go.Bar(x=labels, y=c["dependency_ms"], name="the dependency", marker_color=TAIL))
    charts.layout(fig, height=360, barmode="group", yaxis_title="ms")
    return fig


def _network(c: dict[str, Any]) -> go.Figure:
    fig = go.Figure(go.Histogram(x=c["gap_ms"], nbinsx=60, marker_color=TAIL, name="calls"))
    charts.layout(fig, height=360, xaxis_title="gap (ms)", yaxis_title="calls")
    fig.update_yaxes(type="log", dtick=1)
    return fig


def _forward(c: dict[str, Any]) -> go.Figure:
    fit = f"{fmt.ms(c['intercept_ms'])} per call + {fmt.ms(c['slope_ms'])} per item"
    fig = _points_and_fit(c, "batch_size", "forward_ms", "forward", P99_LINE, fit, empty_top=1)
    charts.layout(fig, height=360, xaxis_title="batch size", yaxis_title="forward (ms)")
    return fig


def _tail_excess(c: dict[str, Any]) -> go.Figure:
    colors = [TAIL if flagged else NEUTRAL for flagged in c["unexplained"]]
    fig = go.Figure(
        go.Bar(
            x=[share * 100 for share in c["share"]],
            y=c["span"],
            orientation="h",
            marker_color=colors,
            customdata=list(zip(c["present_in_tail"], c["present_in_body"], strict=True)),
            hovertemplate=(
                "%{y}: %{x:.0f} % of the tail excess<br>in %{customdata[0]:.0%} of slow requests, "
                "%{customdata[1]:.0%} of the others<extra></extra>"
            ),
            name="share of the tail excess",
        )
    )
    charts.layout(fig, height=320, xaxis_title="share of the tail excess (%)", yaxis_title="")
    fig.update_yaxes(autorange="reversed")
    return fig


def _miss_rate(c: dict[str, Any]) -> go.Figure:
    fig = go.Figure(
        go.Scatter(
            x=c["seconds"],
            y=[rate * 100 for rate in c["miss_rate"]],
            mode="lines+markers",
            line={"color": TAIL},
            customdata=c["requests"],
            hovertemplate="%{x:.0f} s: %{y:.1f} % of %{customdata} requests<extra></extra>",
            name="requests taking the fallback",
        )
    )
    fig.add_hline(y=c["overall_rate"] * 100, line_color=BODY, line_dash="dot", annotation_text="over the run")
    charts.layout(fig, height=320, xaxis_title="time into the run (s)", yaxis_title="miss rate (%)")
    return fig


BUILDERS = {
    "stall_timeline": _stall_timeline,
    "wait_vs_concurrency": _wait_vs_concurrency,
    "arrival_vs_wait": _arrival_vs_wait,
    "log_duration_histogram": _histogram,
    "warmup_curve": _warmup,
    "dependency_tail_share": _dependency,
    "network_gap": _network,
    "forward_vs_batch": _forward,
    "tail_excess_by_span": _tail_excess,
    "miss_rate_over_time": _miss_rate,
    **mechanisms.BUILDERS,
}


def evidence_figure(chart: dict[str, Any] | None) -> go.Figure | None:
    """The evidence chart of a finding (None when it has no chart data of a known kind)."""
    if not chart or chart.get("kind") not in BUILDERS:
        return None
    return BUILDERS[chart["kind"]](chart)


def confidence_label(confidence: float) -> str:
    if confidence >= 0.8:
        return "strong"
    if confidence >= 0.5:
        return "likely"
    if confidence >= 0.2:
        return "possible"
    return "weak"


def finding_card(index: int, finding: dict[str, Any]) -> Any:
    """Draw one finding; returns the slot its "fixing this" line goes in (whatif_section)."""
    with st.container(border=True):
        head, score = st.columns([4, 1])
        where = " · ".join(
            x
            for x in (finding.get("stage"), finding.get("span_name") and f"span `{finding['span_name']}`")
            if x
        )
        head.subheader(f"{index}. {TITLES.get(finding['pattern'], finding['pattern'])}")
        head.caption(f"pattern `{finding['pattern']}`" + (f" · {where}" if where else ""))
        score.metric(
            "confidence",
            f"{finding['confidence']:.2f}",
            help="Calibrated on simulated runs with a planted cause (bench/RESULTS.md, Diagnosis).",
        )
        score.caption(confidence_label(finding["confidence"]))
        if finding.get("share") is not None:
            score.metric(
                "share of the tail",
                fmt.pct(finding["share"], 0),
                help="Of the tail excess (the slowest requests' mean latency minus the middle half's).",
            )
        st.markdown(finding["evidence"].get("summary", ""))
        chart = finding["evidence"].get("chart")
        fig = evidence_figure(chart)
        if fig is not None:
            st.markdown(f"**{CHART_TITLES.get(chart['kind'], 'Evidence')}**")
            st.plotly_chart(fig, key=f"diagnosis_chart_{index}", config=charts.CONFIG)
        st.success(f"**What to change.** {finding['advice']}", icon=":material/build:")
        slot = st.empty()
        with st.expander("The numbers behind it"):
            st.json(finding["evidence"].get("stats", {}))
    return slot


def _diagnose(store, run: str, progress=None) -> dict[str, Any]:
    """The diagnosis as plain data (figures are built per rerun)."""
    result: Diagnosis = diagnose(store, run, progress=progress)
    out = result.to_dict(with_chart=True)
    out["seconds"] = round(result.seconds, 3)
    return out


def sampling_note(sampling: dict[str, Any]) -> str:
    """What a sampled diagnosis read and how far its tail figures can be off."""
    p99, excess = sampling.get("p99_ms_95ci"), sampling.get("excess_ms_95ci")
    error = (
        f" Sampling error (95 %, over windows): p99 {fmt.ms(p99[0])}–{fmt.ms(p99[1])}, tail excess "
        f"{fmt.ms(excess[0])}–{fmt.ms(excess[1])}."
        if p99 and excess
        else ""
    )
    return (
        f"A large run: read as the requests starting in {sampling['windows']} windows of "
        f"{sampling['window_s']:g} s spread over it ({fmt.count(sampling['spans_read'])} of "
        f"{fmt.count(sampling['spans_in_run'])} spans, {sampling['time_fraction']:.1%} of its time).{error} "
        "`tailscope diagnose --max-spans 0` reads it whole."
    )


CACHED_DIAGNOSES = 32  # per server process, the least recently computed dropped first


@st.cache_resource(show_spinner=False)
def _diagnoses() -> dict[tuple[Any, ...], dict[str, Any]]:
    """Diagnoses of this server, by (store, run, run_version): shared by every session, kept while the
    run's spans and the rules stay the same (a write to another run does not drop them)."""
    return {}


def _cached_diagnosis(run: str) -> dict[str, Any]:
    """The run's diagnosis from the cache, else computed under a progress bar (a large run's takes
    seconds) and cached per run and rules version."""
    key = (data.where(), run, data.get(run_version, run))
    cache = _diagnoses()
    if key not in cache:
        bar = st.progress(0.0, text="Diagnosing the run: reading its spans…")

        def progress(fraction: float, step: str) -> None:
            bar.progress(min(max(fraction, 0.0), 1.0), text=f"Diagnosing the run: {step}…")

        result = _diagnose(data.store(), run, progress)
        bar.empty()
        while len(cache) >= CACHED_DIAGNOSES:
            cache.pop(next(iter(cache)))
        cache[key] = result
    return cache[key]


def render() -> None:
    st.title("Diagnosis")
    st.caption(
        "The causes of the run's latency tail, named from trace timing (overlaps, co-occurring stalls, "
        "arrival rates, duration modes, request order) and confirmed by runtime signals where present. "
        "Confidence is calibrated on the simulated services it was built on (findings at 0.5 or more named "
        "the planted cause; a healthy run shows none but compute_bound); on services of a new shape it is "
        "right far less often (README, \"How far to trust the diagnosis\"): read a finding's evidence "
        "before acting on it."
    )
    flt = filters.current()
    run = flt.run
    if run is None:
        runs = data.get(list_runs)
        if not runs:
            notice.no_data("The store has no runs yet")
            return
        if len(runs) > 1:
            st.info("The diagnosis looks at one run: pick it in the sidebar.", icon=":material/info:")
            return
        run = runs[0]
    result = _cached_diagnosis(run)
    if result.get("reason"):
        notice.no_data(result["reason"], "A diagnosis needs at least 50 requests with a request root span.")
        if not result["findings"]:
            return
    st.markdown(
        f"Run **{result['run']}**: {fmt.count(result['requests'])} requests, "
        f"{len(result['findings'])} finding(s). The sidebar's run filter applies; the service, route and "
        "time filters do not (a cause is judged on the whole run)."
    )
    if result.get("sampling"):
        st.caption(sampling_note(result["sampling"]))
    if population_note(result):
        st.markdown(population_note(result))
    if not result["findings"]:
        st.success("No cause of a latency tail stands out in this run.", icon=":material/check_circle:")
        return
    for pattern, error in (result.get("errors") or {}).items():
        st.warning(f"The {pattern} detector failed on this run: {error}", icon=":material/warning:")
    _where_the_tail_goes(result)
    slots = [finding_card(i, finding) for i, finding in enumerate(result["findings"], 1)]
    whatif_section.render(run, result, slots)


def _where_the_tail_goes(result: dict[str, Any]) -> None:
    """The tail excess and each finding's share of it, in the order of the cards below."""
    tail, rows = result.get("tail"), share_rows(result)
    if not tail or not rows:
        return
    st.markdown(
        f"**Where the tail goes.** p50 {fmt.ms(tail['p50_ms'])}, p99 {fmt.ms(tail['p99_ms'])}; requests "
        f"from p{tail['tail_from_quantile'] * 100:g} on take {fmt.ms(tail['excess_ms'])} more than the "
        "middle half on average (the tail excess). Named causes account for "
        f"{fmt.pct(tail['named_share'], 0)} of it; causes judged possible (below 0.5) take no share. "
        "Causes that overlap (a pause also queues the requests behind it) are scaled together so that "
        "the shares never pass 100 %."
    )
    st.plotly_chart(shares_figure(rows), key="diagnosis_shares", config=charts.CONFIG)


notice.guarded(render)
