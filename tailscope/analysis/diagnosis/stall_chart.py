"""gc_pause's evidence chart: the leaf spans of the requests around the longest stall episode, one row
per request, slow ones marked."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context


def stall_chart(ctx: Context, spans, slow, ep_inst, ep_t0, ep_t1) -> dict:
    """Stall timeline: leaf spans of the requests around the longest episode, one row per request."""
    f = ctx.frame
    k = int(np.argmax(ep_t1 - ep_t0))
    inst, t0, t1 = int(ep_inst[k]), int(ep_t0[k]), int(ep_t1[k])
    pad = max(t1 - t0, 20_000_000)
    lo, hi = t0 - pad, t1 + pad
    reqs = f.requests
    near = np.nonzero((reqs.instance == inst) & (reqs.start < hi) & (reqs.start + reqs.latency > lo))[0]
    # The 60 requests nearest the stall (those overlapping it first), drawn in start order.
    gap = np.maximum(np.maximum(t0 - (reqs.start[near] + reqs.latency[near]), reqs.start[near] - t1), 0)
    sel_req = np.sort(near[np.argsort(gap, kind="stable")[:60]])
    in_window = (ep_inst == inst) & (ep_t0 < hi) & (ep_t1 > lo)
    row_of = np.full(len(reqs), -1)
    row_of[sel_req] = np.arange(len(sel_req))
    r = f.request[spans]
    keep = (r >= 0) & (row_of[np.maximum(r, 0)] >= 0)
    s = spans[keep]
    return {
        "kind": "stall_timeline",
        "row": row_of[f.request[s]].tolist(),
        "start_ms": ((f.start[s] - lo) / 1e6).round(3).tolist(),
        "end_ms": ((f.end[s] - lo) / 1e6).round(3).tolist(),
        "name": [f.names[c] for c in f.name[s]],
        "slow": slow[keep].tolist(),
        "stall_ms": [round((t0 - lo) / 1e6, 3), round((t1 - lo) / 1e6, 3)],
        "stalls_ms": [
            [round((a - lo) / 1e6, 3), round((b - lo) / 1e6, 3)]
            for a, b in zip(ep_t0[in_window], ep_t1[in_window], strict=True)
        ],
        "instance": f.instances[inst],
    }
