"""gc_pause from the runtime's own pause reports (span events with a duration), where timing cannot
see the pauses: with about one request in flight a pause stretches one span at a time and leaves no
cross-name alignment to detect. A runtime does not invent pauses, so their share of the tail excess
stands as evidence on its own, capped below a timing-confirmed finding."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.long_stalls import request_stall_overlap, slow_flags
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stall_chart import stall_chart
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight

REPORTED_CAP = 0.9


def reported_weight(ctx: Context, overlap: np.ndarray, share: float) -> float:
    """Weight of the pauses the runtime reports: their share of the tail excess, or, beside a heavier
    cause (a slow dependency owning the p99), the share of a request's time they take, on average
    over the requests (0.5 at 6 %: a runtime spending that much of a request's time paused is a cause
    of its own, not the background of minor collections). Per request, not the mean pause time over
    the median latency: long requests (a streamed answer, a slow call awaited) overlap the background
    collections of their seconds by chance, and over a short median that read as a cause."""
    latency = np.maximum(ctx.frame.requests.latency.astype(np.float64), 1.0)
    added = float(np.mean(np.minimum(overlap / latency, 1.0)))
    return max(material_weight(share), logistic(added, 0.06, 0.015))


def reported_only(ctx: Context, advice: str) -> list[Finding]:
    """A finding from the runtime's own pause reports where timing cannot see the pauses."""
    f = ctx.frame
    if not len(f.gc_time):
        return []
    g_inst, g0, g1 = ctx.reported_pauses
    overlap = request_stall_overlap(ctx, g_inst, g0, g1)
    share = excess_share(overlap, ctx.split)
    confidence = REPORTED_CAP * reported_weight(ctx, overlap, share)
    if confidence < 0.05:
        return []
    split = ctx.split
    tail_hit = float((overlap[split.tail] > 0).mean()) if split.tail.any() else 0.0
    long = (g1 - g0) >= np.percentile(g1 - g0, 90)
    if confidence >= 0.3:  # other detectors discount time frozen in these pauses
        ctx.notes["gc_episodes"] = (g_inst[long], g0[long], g1[long])
    pause_ms = (g1 - g0) / 1e6
    stats = {
        "gc_events": len(g0),
        "longest_pause_ms": round(float(pause_ms.max()), 3),
        "median_pause_ms": round(float(np.median(pause_ms)), 3),
        "tail_requests_in_reported_gc": round(tail_hit, 3),
        "tail_excess_share_in_reported_gc": round(share, 3),
        "tail_excess_share": round(share, 3),  # the report's share of it (shares.py)
        "timing_alone": "too few requests in flight to align stalls across span names",
    }
    summary = (
        f"The runtime reported {len(g0)} GC pauses (longest {pause_ms.max():.1f} ms); they overlap "
        f"{tail_hit:.0%} of tail requests and account for {share:.0%} of the tail excess. Too few requests "
        "were in flight for the pauses to show across span names in the timing alone, so this rests on "
        "the runtime's own reports."
    )
    spans = np.nonzero(f.leaf & (f.request >= 0))[0]
    slow = slow_flags(ctx, f.name[spans], f.dur[spans], len(f.names))
    chart = stall_chart(ctx, spans, slow, g_inst[long], g0[long], g1[long])
    evidence = {"summary": summary, "stats": stats, "chart": chart}
    return [Finding("gc_pause", clamp01(confidence), None, None, evidence, advice)]
