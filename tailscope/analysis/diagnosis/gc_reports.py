"""gc_pause from the runtime's own pause reports (span events with a duration), where timing cannot
see the pauses: with about one request in flight a pause stretches one span at a time and leaves no
cross-name alignment to detect. A runtime does not invent pauses, so their share of the tail excess
stands as evidence on its own, capped below a timing-confirmed finding."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.long_stalls import request_stall_overlap, slow_flags, stall_overlap
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stall_chart import stall_chart
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight

REPORTED_CAP = 0.9


def reported_weight(ctx: Context, overlap: np.ndarray, share: float) -> float:
    """Weight of the pauses the runtime reports: their share of the tail excess, or, beside a heavier
    cause (a slow dependency owning the p99), what they add to the mean request over the median
    latency (0.5 at 3 %: a runtime that delays its requests by that much is a cause of its own, not the
    background of minor collections). What they add leaves out the pause time while the request
    awaited a call whose callee was running (`awaited`): a pause then delays the request only by its
    part after the reply came. Counted whole, a long request (a streamed answer, a slow call) overlaps
    the collections of its seconds by chance (a healthy LLM orchestrator's: 31 % of the median; its
    delay: 2 %), and every call's pause read as a delay (so the mark was 6 % before)."""
    added_ns = np.maximum(overlap - awaited(ctx, *ctx.reported_pauses), 0.0)
    added = float(added_ns.mean() / max(np.median(ctx.frame.requests.latency), 1.0))
    return max(material_weight(share), logistic(added, 0.03, 0.0075))


def awaited(ctx: Context, ep_inst, ep_t0, ep_t1) -> np.ndarray:
    """Per request: the pause time on its own instance while a call it made was being served by a
    callee in another process (the callee's SERVER span, under a CLIENT span of the request's
    instance; or, for a callee with no span, the CLIENT span less its last pause-length): the caller
    had nothing to run then."""
    f, reqs = ctx.frame, ctx.frame.requests
    srv = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0) & (f.request >= 0))[0]
    cli = f.parent[srv]
    keep = (f.kind[cli] == KIND_CLIENT) & (f.instance[cli] == reqs.instance[f.request[cli]])
    keep &= f.instance[srv] != f.instance[cli]
    srv, cli = srv[keep], cli[keep]
    out = np.zeros(len(reqs))
    if len(ep_inst) == 0:
        return out
    # a call out to a callee that is not traced (a database, a cache, a vendor: a CLIENT span with
    # nothing below it) is awaited too, up to its end less the longest pause: its reply came at some
    # moment of the call, and a pause holding its read (the last pause-length of it) may have delayed
    # the request; the pauses before that fell while the request waited for the reply
    lone = np.nonzero((f.kind == KIND_CLIENT) & f.leaf & (f.request >= 0))[0]
    lone = lone[f.instance[lone] == reqs.instance[f.request[lone]]]
    hold = int((ep_t1 - ep_t0).max())
    lone = lone[f.end[lone] - hold > f.start[lone]]
    if len(srv) == 0 and len(lone) == 0:
        return out
    # calls side by side (a fan-out) await at once: their windows merged per request, counted once
    req = np.r_[f.request[srv], f.request[lone]]
    t0, t1 = np.r_[f.start[srv], f.start[lone]], np.r_[f.end[srv], f.end[lone] - hold]
    order = np.lexsort((t0, req))
    req, t0, t1, inst = req[order], t0[order], t1[order], np.r_[f.instance[cli], f.instance[lone]][order]
    span = int(t1.max()) + 1
    reach = np.maximum.accumulate(req.astype(np.int64) * span + t1) - req.astype(np.int64) * span
    new = np.r_[True, (req[1:] != req[:-1]) | (t0[1:] > reach[:-1])]
    first = np.nonzero(new)[0]
    ends = np.maximum.reduceat(t1, first)
    paused = stall_overlap(inst[first], t0[first], ends, ep_inst, ep_t0, ep_t1)
    np.add.at(out, req[first], paused)
    return out


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
