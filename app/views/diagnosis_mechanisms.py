"""Evidence charts of the diagnosis' mechanism findings added for issue 25 (a deadline and a retry, a
payload that grows, a CPU quota): pure figure builders over a finding's `evidence["chart"]` data,
registered in app/views/diagnosis.py's BUILDERS."""

from __future__ import annotations

import itertools
from typing import Any

import plotly.graph_objects as go

from app.components import charts, fmt
from app.components.palette import BODY, TAIL, TOTAL


def attempt_durations(c: dict[str, Any]) -> go.Figure:
    """The durations of the first attempts of retried calls against the other calls', with the
    deadline they pile up at."""
    edges = c["edges_ms"]
    mids = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=mids, y=c["other_calls"], marker_color=BODY, name="calls not retried"))
    fig.add_trace(go.Bar(x=mids, y=c["first_attempts"], marker_color=TAIL, name="first attempts (retried)"))
    fig.add_vline(x=c["timeout_ms"], line_color=TOTAL, line_dash="dot",
                  annotation_text=f"deadline {fmt.ms(c['timeout_ms'])}")
    charts.layout(fig, height=360, barmode="overlay", bargap=0, xaxis_title="attempt duration (ms)",
                  yaxis_title="calls")
    fig.update_yaxes(type="log")
    return fig


def size_vs_time(c: dict[str, Any]) -> go.Figure:
    """A stage's duration against the size it handled (tail requests in red), with the fitted line."""
    tail = c["tail"]
    fig = go.Figure()
    for flag, color, label in ((False, BODY, "other requests"), (True, TAIL, "tail requests")):
        xs = [x for x, t in zip(c["size"], tail, strict=True) if t == flag]
        ys = [y for y, t in zip(c["duration_ms"], tail, strict=True) if t == flag]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", marker={"color": color, "opacity": 0.4},
                                 name=label))
    fig.add_trace(go.Scatter(x=c["fit_size"], y=c["fit_ms"], mode="lines", line={"color": TOTAL, "width": 3},
                             name="fitted (Theil-Sen)"))
    charts.layout(fig, height=360, xaxis_title=c["size_attribute"], yaxis_title="duration (ms)")
    return fig


def stall_phase(c: dict[str, Any]) -> go.Figure:
    """When work resumes after each stall, modulo the CPU quota's period: a quota's stalls end on one
    phase per instance (a tall bar), GC pauses anywhere (a flat histogram)."""
    fig = go.Figure(go.Histogram(x=c["phase_ms"], xbins={"start": 0, "end": c["period_ms"], "size": 2},
                                 marker_color=TAIL, name="stall ends"))
    charts.layout(fig, height=320, xaxis_title=f"stall end modulo {c['period_ms']:g} ms (ms)",
                  yaxis_title="stalls")
    return fig


def wait_vs_running(c: dict[str, Any]) -> go.Figure:
    """The wait before the server's handler starts against the calls the instance was running."""
    fig = go.Figure(go.Scatter(x=c["running"], y=c["wait_ms"], mode="markers",
                               marker={"color": TAIL, "opacity": 0.35}, name="calls"))
    charts.layout(fig, height=340, xaxis_title="calls the server instance was running when it was sent",
                  yaxis_title="wait before the handler starts (ms)")
    return fig


def proxy_time(c: dict[str, Any]) -> go.Figure:
    """A forwarding tier's own time per request over the run, the requests released together after a
    stall in red."""
    fig = go.Figure()
    for flag, color, label in ((False, BODY, "requests"), (True, TAIL, "released together after a stall")):
        xs = [x for x, r in zip(c["time_s"], c["released"], strict=True) if r == flag]
        ys = [y for y, r in zip(c["proxy_ms"], c["released"], strict=True) if r == flag]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", marker={"color": color, "opacity": 0.5},
                                 name=label))
    charts.layout(fig, height=340, xaxis_title=f"time into the run (s), {c['instance']}",
                  yaxis_title="the proxy's own time per request (ms)")
    return fig


BUILDERS = {
    "proxy_time": proxy_time,
    "attempt_durations": attempt_durations,
    "size_vs_time": size_vs_time,
    "stall_phase": stall_phase,
    "wait_vs_running": wait_vs_running,
}
TITLES = {
    "timeout_retry": "A client deadline cuts calls short, and they are retried",
    "large_payload": "Work that grows with the payload",
    "cpu_throttling": "Process-wide stalls from a CPU quota (throttling)",
}
CHART_TITLES = {
    "attempt_durations": "Attempt durations: the first attempts of retried calls end at the deadline",
    "size_vs_time": "The stage's duration against the size it handled, with the fitted line",
    "stall_phase": "When work resumes after each stall, within the CPU quota's period",
    "wait_vs_running": "Wait before the handler starts, against how busy the server instance was",
    "proxy_time": "The forwarding tier's own time per request: requests released together after a stall",
}
