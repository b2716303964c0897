"""Where a reported GC pause lies: from its event's time, or up to it.

A runtime reports a collection with its duration, but the event's timestamp is either the pause's
start (an instrumentation that copies the collector's start time) or the moment it heard of the
collection, after it ended (a callback run when the collector is done: JVM GC notifications,
CPython's gc.callbacks "stop", Node's perf_hooks entries). The two read the same pauses a duration
apart. The spans tell them apart: a pause stops the process, so no span of that process ends inside
it. Per reported pause of at least MIN_NS, on its instance: whether any span there ends inside the
pause (its middle, the outer EDGE of each side left out), for either reading. Where the end-stamped
reading leaves clearly more pauses empty (by CLEARER, and most of them), the events are end-stamped
and their times are moved to the pauses' starts; otherwise they are read as starts.
"""

from __future__ import annotations

import numpy as np

MIN_NS = 5_000_000
EDGE = 0.1
CLEARER = 0.3
MIN_EVENTS = 5


def _empty(inst: np.ndarray, t0: np.ndarray, t1: np.ndarray, span_inst: np.ndarray, span_end: np.ndarray,
           sorted_keys: dict[int, np.ndarray]) -> np.ndarray:
    """Per interval [t0, t1) on instance `inst`: no span of that instance ends inside it.
    `sorted_keys`: the spans' sorted keys per horizon, made once for every interval asked about."""
    horizon = int(max(span_end.max(initial=0), t1.max(initial=0))) + 1
    if horizon not in sorted_keys:
        sorted_keys[horizon] = np.sort(span_inst.astype(np.int64) * horizon + span_end)
    keys = sorted_keys[horizon]
    base = inst.astype(np.int64) * horizon
    return np.searchsorted(keys, base + t1) == np.searchsorted(keys, base + t0)


def pause_starts(gc_instance: np.ndarray, gc_time: np.ndarray, gc_dur: np.ndarray, span_instance: np.ndarray,
                 span_end: np.ndarray) -> tuple[np.ndarray, bool]:
    """The reported pauses' start times, and whether the events were read as end-stamped."""
    sel = (gc_dur >= MIN_NS) & (gc_instance >= 0)
    if sel.sum() < MIN_EVENTS or len(span_end) == 0:
        return gc_time, False
    inst, t, d = gc_instance[sel], gc_time[sel], gc_dur[sel]
    edge = (EDGE * d).astype(np.int64)
    keys: dict[int, np.ndarray] = {}  # the two readings mostly share a horizon: one sort
    as_start = _empty(inst, t + edge, t + d - edge, span_instance, span_end, keys).mean()
    as_end = _empty(inst, t - d + edge, t - edge, span_instance, span_end, keys).mean()
    if as_end >= 0.5 and as_end >= as_start + CLEARER:
        return gc_time - gc_dur, True
    return gc_time, False
