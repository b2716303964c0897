"""Arrivals a stopped process held and let go at once: a burst the stop made, not the load.

A process stopped by a pause (a collector's stop of the world, a CPU quota, a blocked event loop)
accepts nothing and sends nothing while it is stopped; the requests that reached it meanwhile start
together when it resumes, and the calls they make downstream leave in a clump. Downstream, that clump
looks like a burst of arrivals and the waits it causes like a queue following the load; but the load
did not change: the stop held it (its waits are the pause's side effect, not a second cause).

`spread(ctx, arrival)`: per request, its arrival with the requests held by a stop put back where the
stop found them. A request is held where the outermost span of its trace (the entry: the request's own
root, or the root of the service that sent it) starts inside a stop of its process or within
max(5 ms, 2 % of the stop) after its end (the stops gc_pause, proxy_stalls and the other stop detectors
left in ctx.notes, merged per instance); its arrival moves back by the time from a uniform moment of
the stop to its entry's start (the time it then took to be sent is kept). Arrivals of no held request
are unchanged; with no stop noted, the arrivals are returned as they are.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context

NOTES = ("gc_episodes", "proxy_stalls")
MIN_SLACK_NS = 5_000_000
SLACK = 0.02
SHIFT = 44  # ns of a run's time below an instance's code in one int64 key (2^44 ns: 4.9 hours)
GOLDEN = 0.6180339887498949


def _stops(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The noted stops, merged per instance: (instance, start, end), by instance then start."""
    parts = [ctx.notes[k] for k in NOTES if ctx.notes.get(k) is not None and len(ctx.notes[k][0])]
    if not parts:
        return None
    inst = np.concatenate([np.asarray(p[0], np.int64) for p in parts])
    t0 = np.concatenate([np.asarray(p[1], np.int64) for p in parts])
    t1 = np.concatenate([np.asarray(p[2], np.int64) for p in parts])
    order = np.lexsort((t0, inst))
    inst, t0, t1 = inst[order], t0[order], t1[order]
    # merge overlaps per instance: a new stop where the instance changes or it starts after every
    # earlier stop of the instance has ended
    reach = t1.copy()
    for k in range(1, len(reach)):  # one pass over the stops (tens to hundreds), not the spans
        if inst[k] == inst[k - 1] and t0[k] <= reach[k - 1]:
            reach[k] = max(reach[k], reach[k - 1])
    new = np.r_[True, (inst[1:] != inst[:-1]) | (t0[1:] > reach[:-1])]
    group = np.cumsum(new) - 1
    ends = np.zeros(int(group[-1]) + 1, np.int64)
    np.maximum.at(ends, group, reach)
    return inst[new], t0[new], ends


def spread(ctx: Context, arrival: np.ndarray) -> np.ndarray:
    stops = _stops(ctx)
    if stops is None:
        return arrival
    f = ctx.frame
    reqs = f.requests
    tops = np.nonzero(f.parent < 0)[0]
    traces, first = np.unique(f.trace[tops], return_index=True)
    entry = tops[first][np.searchsorted(traces, f.trace[reqs.root])]
    s_inst, s0, s1 = stops
    key = (s_inst << SHIFT) + np.clip(s0, 0, (1 << SHIFT) - 1)  # instance-major, then time
    asked = (f.instance[entry].astype(np.int64) << SHIFT) + f.start[entry]
    at = np.searchsorted(key, asked, side="right") - 1
    ok = at >= 0
    k = np.maximum(at, 0)
    slack = np.maximum(MIN_SLACK_NS, SLACK * (s1[k] - s0[k]))
    held = ok & (s_inst[k] == f.instance[entry]) & (f.start[entry] <= s1[k] + slack)
    if not held.any():
        return arrival
    # a uniform moment of the stop, the same every time (no draw from the detectors' shared generator)
    moment = s0[k] + np.modf(np.arange(len(k)) * GOLDEN)[0] * (s1[k] - s0[k])
    back = np.where(held, np.maximum(f.start[entry] - moment, 0.0), 0.0)
    return (arrival - back).astype(arrival.dtype)
