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


BUILDERS = {"attempt_durations": attempt_durations}
TITLES = {
    "timeout_retry": "A client deadline cuts calls short, and they are retried",
    "large_payload": "Work that grows with the payload",
    "cpu_throttling": "Process-wide stalls from a CPU quota (throttling)",
}
CHART_TITLES = {
    "attempt_durations": "Attempt durations: the first attempts of retried calls end at the deadline",
}
