"""Where the tail excess goes, cause by cause: one stacked bar over the run's tail excess.

Pure helpers of the Diagnosis page (no Streamlit): the named causes' shares, the unexplained-tail
findings' shares (located, no mechanism) and the rest, which adds the bar up to 100 %.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from app.components import charts
from app.components.palette import NEUTRAL, STAGE_COLORS, TAIL

UNEXPLAINED = "unexplained_tail"
CAUSE_COLORS = [STAGE_COLORS[s] for s in ("ingress", "queue", "model_forward", "downstream", "parsing")]
REST = "#DDDDDD"


def share_rows(result: dict[str, Any]) -> list[tuple[str, float, str]]:
    """(label, share of the tail excess, kind) per finding that has a share, then the rest; kind is
    'cause', 'unexplained' or 'rest'. Empty when no finding has a share."""
    rows: list[tuple[str, float, str]] = []
    for i, fd in enumerate(result.get("findings", []), 1):
        if fd.get("share") is None or fd["share"] <= 0:
            continue
        where = f" ({fd['span_name']})" if fd.get("span_name") else ""
        kind = "unexplained" if fd["pattern"] == UNEXPLAINED else "cause"
        label = f"{i}. {'no mechanism' if kind == 'unexplained' else fd['pattern']}{where}"
        rows.append((label, float(fd["share"]), kind))
    if not rows:
        return []
    rest = max(0.0, 1.0 - sum(share for _, share, _ in rows))
    if rest > 0.005:
        rows.append(("not accounted for", rest, "rest"))
    return rows


def shares_figure(rows: list[tuple[str, float, str]]) -> go.Figure:
    """One horizontal bar of 100 % of the tail excess, a segment per row."""
    fig = go.Figure()
    causes = 0
    for label, share, kind in rows:
        if kind == "cause":
            color, causes = CAUSE_COLORS[causes % len(CAUSE_COLORS)], causes + 1
        else:
            color = TAIL if kind == "unexplained" else REST
        fig.add_trace(
            go.Bar(
                x=[share * 100],
                y=["tail excess"],
                orientation="h",
                name=label,
                marker_color=color,
                marker_line_color=NEUTRAL if kind == "rest" else color,
                text=[f"{share:.0%}"] if share >= 0.06 else None,
                textposition="inside",
                hovertemplate=f"{label}: %{{x:.1f}} % of the tail excess<extra></extra>",
            )
        )
    charts.layout(fig, height=200, barmode="stack", xaxis_title="share of the tail excess (%)")
    fig.update_xaxes(range=[0, 100])
    fig.update_yaxes(showticklabels=False)
    fig.update_layout(legend_traceorder="normal")  # in the order of the cards, not reversed
    return fig


POPULATION_WORDS = {
    "request": "requests",
    "consumer": "consumer units (publish to end of processing)",
    "stream": "streamed requests, from the end of their input to the final result (a stream's length is "
    "its input's, not latency)",
}


def population_note(result: dict[str, Any]) -> str:
    """What the diagnosis took as its units where it split the run (queue consumers' work, an end user's
    requests and the service's own below a relay, streamed requests): one line per population, its
    entry point and its p50/p99; "" where the run's requests were diagnosed as they are."""
    lines = []
    for pop in result.get("populations") or []:
        tail = pop.get("tail") or {}
        what = POPULATION_WORDS.get(pop["unit"], pop["unit"])
        figures = f": p50 {tail['p50_ms']:.1f} ms, p99 {tail['p99_ms']:.1f} ms" if tail else ""
        lines.append(f"- {pop['units']:,} {what} of **{pop['entry_point']}**{figures}")
    if not lines:
        return ""
    return "Diagnosed as (each finding names its entry point):\n" + "\n".join(lines)
