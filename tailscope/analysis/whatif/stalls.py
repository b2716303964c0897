"""The stalls the "no GC pauses" lever removes: the runtime's reported pauses where the run has them,
else the diagnosis' timing episodes widened to the silent stretch they sit in, and stretches where an
instance stopped and then let several requests in at once (a process accepts nothing while stopped)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame


def stalls_to_remove(frame: TraceFrame, findings: list[dict[str, Any]], seed: int):
    """Pauses to remove: the runtime's own reports (those that say how long they lasted: a Zipkin
    annotation carries only a time: then the silent stretch each report ends), else the diagnosis'
    timing episodes."""
    ok = (frame.gc_instance >= 0) & (frame.gc_dur > 0)
    if ok.any():
        return frame.gc_instance[ok], frame.gc_time[ok], frame.gc_time[ok] + frame.gc_dur[ok]
    if not any(fd.get("pattern") == "gc_pause" for fd in findings):
        return None
    ended = reported_ends(frame)
    return ended if ended is not None else timing_stalls(frame, seed)


REPORT_SLACK_NS = 100_000  # a report's time and the spans it released differ by their clocks' rounding


def reported_ends(frame: TraceFrame):
    """Pauses reported with a time and no length (a Zipkin annotation at the pause's end): each the
    silent stretch of its instance that the report ends. A stopped process starts and ends no span,
    so the pause began no earlier than the instance's last span boundary before the report (the
    stretch is the pause plus at most one gap between boundaries; boundaries within 0.1 ms of the
    report are the spans it released, their times rounded apart). None where there are no such
    reports."""
    ok = (frame.gc_instance >= 0) & (frame.gc_dur <= 0)
    if not ok.any():
        return None
    inst, t = frame.gc_instance[ok], frame.gc_time[ok].astype(np.int64)
    begin = t.copy()
    for i in np.unique(inst).tolist():
        own = frame.instance == i
        marks = np.unique(np.r_[frame.start[own], frame.start[own] + frame.dur[own]]).astype(np.int64)
        sel = np.nonzero(inst == i)[0]
        if len(marks) == 0:
            continue
        before = np.searchsorted(marks, t[sel] - REPORT_SLACK_NS, side="left") - 1
        has = before >= 0
        begin[sel[has]] = marks[before[has]]
    keep = begin < t
    return inst[keep].astype(np.int64), begin[keep], t[keep]


def timing_stalls(frame: TraceFrame, seed: int, quota: bool = False):
    """The stalls found from timing alone (gc_pause's episodes widened to the silent stretch they sit
    in, and freezes), whatever the runtime reports: None where timing finds none. `quota`: also the
    stretched single spans whose ends keep a CPU quota's period (quota_stalls: a process with about
    one request in flight, a proxy whose own work is small), as the cpu_throttling finding read them."""
    from tailscope.analysis.diagnosis import gc_pause, quota_stalls
    from tailscope.analysis.diagnosis.model import Context

    ctx = Context(frame, seed=seed)
    gc_pause.detect(ctx)
    if quota:
        quota_stalls.detect(ctx)
    episodes = ctx.notes.get("gc_episodes")
    if episodes is None:
        return None
    inst, s0, s1 = frozen_stretches(frame, *episodes)
    f_inst, f0, f1 = freezes(frame)
    return np.r_[inst, f_inst], np.r_[s0, f0], np.r_[s1, f1]


PERIOD_NS = 100_000_000  # a CPU quota's scheduling period (cgroup CFS default)
ON_PHASE_NS = 5_000_000


def on_period(stalls, period_ns: int = PERIOD_NS, tolerance_ns: int = ON_PHASE_NS):
    """The stalls that end on a CPU quota's period boundary: per instance, those whose end lies
    within `tolerance_ns` of the instance's mean phase of stall ends modulo the period (a quota
    refills at one phase; stalls of another kind end anywhere)."""
    inst, s, e = stalls
    keep = np.zeros(len(inst), bool)
    for i in np.unique(inst).tolist():
        sel = np.nonzero(inst == i)[0]
        angle = 2 * np.pi * (e[sel] % period_ns) / period_ns
        phase = np.arctan2(np.sin(angle).mean(), np.cos(angle).mean()) / (2 * np.pi) * period_ns
        off = (e[sel] - phase) % period_ns
        keep[sel] = np.minimum(off, period_ns - off) <= tolerance_ns
    return inst[keep], s[keep], e[keep]


FREEZE_MIN_NS = 2_000_000
FREEZE_RATIO = 20.0
CLUMP_NS = 500_000


def freezes(frame: TraceFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stretches in which no span of an instance started or ended (at least 2 ms and 20 times its
    median stretch between span boundaries) and that end with work let in at once: two or more
    entries into the instance (request roots, a consumer of a message, a callee's span) starting
    within 0.5 ms of the end. A stopped process accepts nothing while stopped, then all that waited."""
    out_i, out_s, out_e = [], [], []
    parent = frame.parent
    has_p = parent >= 0
    entry = ~has_p
    entry[has_p] = frame.instance[parent[has_p]] != frame.instance[has_p]
    for i in np.unique(frame.instance).tolist():
        own = frame.instance == i
        marks = np.unique(np.r_[frame.start[own], frame.start[own] + frame.dur[own]])
        if len(marks) < 100:
            continue
        gaps = np.diff(marks)
        long = np.nonzero(gaps >= max(FREEZE_MIN_NS, FREEZE_RATIO * float(np.median(gaps))))[0]
        entries = np.sort(frame.start[own & entry])
        b = marks[long + 1]
        let_in = np.searchsorted(entries, b + CLUMP_NS, side="right") - np.searchsorted(
            entries, b - CLUMP_NS, side="left"
        )
        keep = long[let_in >= 2]
        out_i.append(np.full(len(keep), i, np.int64))
        out_s.append(marks[keep])
        out_e.append(marks[keep + 1])
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_i), np.concatenate(out_s), np.concatenate(out_e)


def frozen_stretches(frame: TraceFrame, inst: np.ndarray, t0: np.ndarray, t1: np.ndarray):
    """Timing episodes widened to the pause itself: while a process is stopped no span of it starts
    or ends, so each episode becomes the longest stretch without a span boundary on its instance that
    overlaps it (the episode as it was where no such stretch is at least half as long)."""
    out_s, out_e = t0.astype(np.int64).copy(), t1.astype(np.int64).copy()
    for i in np.unique(inst).tolist():
        own = frame.instance == i
        marks = np.unique(np.r_[frame.start[own], frame.start[own] + frame.dur[own]])
        if len(marks) < 2:
            continue
        sel = np.nonzero(inst == i)[0]
        lo = np.maximum(np.searchsorted(marks, t0[sel], side="right") - 1, 0)
        hi = np.minimum(np.searchsorted(marks, t1[sel], side="left"), len(marks) - 1)
        gaps = np.diff(marks)
        for j, a, b in zip(sel.tolist(), lo.tolist(), hi.tolist(), strict=True):
            if b <= a:
                continue
            k = a + int(np.argmax(gaps[a:b]))
            if gaps[k] >= 0.5 * (t1[j] - t0[j]):
                out_s[j], out_e[j] = marks[k], marks[k + 1]
    return inst, out_s, out_e
