"""Stalls of the threads that allocate, not of the process: a collector that cannot keep up makes the
allocating threads wait (ZGC's allocation stalls, Go's GC assists near GOMEMLIMIT), while the others
run on, so no process-wide pause shows and the time lost is in the own time of the spans that build
objects (the code between calls: parsing a response, tokenizing), not in the remote calls they make.

The fix (the heap no longer outrun): on the finding's instances, each step's own time - the gap before
a child span (the code that ran before it), a parent's trailing time after its last child, a leaf's
duration - in a stretch of the run where that step's own time, or the instances' own times together
(each over its step's median: the stall is the process's state, and a step seldom run shows it in too
few calls), were over CALM_RATIO times the quieter quarter's, takes the own time of the same step in a
calm stretch (drawn from the run, never longer than it was). A step is the pair (parent's name, span's
name) for a gap, the span's name else. A leaf CLIENT span is a step too: its end is when the calling
thread reads the answer, and a stalled thread (or one waiting for a carrier a stalled thread holds)
reads it late. Assumptions: the disturbed stretches are the stall's (another cause slowing the same
code or a callee with no span of its own then is removed with it), and a step's calm own time is its
own time without the stalls (the collector keeps up in calm stretches)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.host_levers import named_instances
from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.retime import Edit

MIN_STEPS = 40  # calls of a step needed to tell its calm stretches


def _as_calm(x: Inputs, rows: np.ndarray, value: np.ndarray, key: np.ndarray, seed: int,
             disturbed: np.ndarray | None = None) -> np.ndarray:
    """Per row, its value or, in a disturbed stretch of its step (`key`), a calm one's (never longer).
    `disturbed`: per row, whether it is in a disturbed stretch (else read per step)."""
    from tailscope.analysis.whatif.queue_levers import _calm

    out = value.copy()
    rng = x.rng(seed)
    for k in np.unique(key).tolist():
        mine = np.nonzero(key == k)[0]
        if len(mine) < MIN_STEPS:
            continue
        calm = _calm(x.frame.start[rows[mine]], value[mine])
        if disturbed is not None:  # a stretch the process or the step was disturbed in
            calm = ~disturbed[mine] if calm is None else calm & ~disturbed[mine]
        if calm.sum() < 20 or calm.all():
            continue
        pool = value[mine[calm]]
        hit = mine[~calm]
        out[hit] = np.minimum(value[hit], pool[rng.integers(0, len(pool), len(hit))])
    return out


def _disturbed(x: Inputs, rows: np.ndarray, value: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Per row, whether it falls in a stretch where the instances' own times, each over its step's
    median, were over CALM_RATIO times the quieter quarter's (the stall is the process's state, not
    a step's: a step seldom run shows it in too few calls)."""
    from tailscope.analysis.whatif.queue_levers import _calm

    ratio = np.ones(len(rows))
    for k in np.unique(key).tolist():
        mine = key == k
        ratio[mine] = value[mine] / max(float(np.median(value[mine])), 1e3)
    calm = _calm(x.frame.start[rows], ratio)
    return np.zeros(len(rows), bool) if calm is None else ~calm


def stalled_own_time_as_calm(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A gc_pause finding (see the module docstring); None where it names no instance, the run reports
    collector pauses on them or the spans' timing shows the process paused there (a process-wide
    pause: `no_gc_stalls` removes it), or no step of theirs had a disturbed stretch."""
    inst = np.array(named_instances(x.frame.instances, finding), dtype=np.int64)
    if not len(inst) or np.isin(x.frame.gc_instance, inst).any():
        return None  # (the run reports the collector's pauses there: the process's, no_gc_stalls')
    if x.stalls is not None and np.isin(x.stalls[0], inst).any():
        return None  # (the spans' timing shows the whole process paused there: no_gc_stalls removes
        # that; redrawing every step's own time beside it removes the process's ordinary spread too)
    f, lay = x.frame, x.lay
    on = np.isin(f.instance, inst) & (f.request >= 0)
    edit = Edit.none(len(f))
    # the gap before each child of a span there (the parent's code before it), a parent's trailing
    # own time, an in-process leaf's duration
    child = np.nonzero((lay.parent >= 0) & on[np.maximum(lay.parent, 0)])[0]
    parent = np.nonzero(on & lay.has_children)[0]
    leaf = np.nonzero(on & ~lay.has_children)[0]
    n = len(f.names)
    rows = np.r_[child, parent, leaf]
    if len(rows) < MIN_STEPS:
        return None
    key = np.r_[f.name[lay.parent[child]].astype(np.int64) * n + f.name[child],
                n * n + f.name[parent].astype(np.int64), 2 * n * n + f.name[leaf].astype(np.int64)]
    value = np.r_[lay.gap[child], lay.trailing[parent], f.dur[leaf]].astype(np.float64)
    disturbed = _disturbed(x, rows, value, key)
    new = _as_calm(x, rows, value, key, 61, disturbed)
    a, b = len(child), len(child) + len(parent)
    edit.cut_before[child] = value[:a] - new[:a]
    edit.cut_after[parent] = value[a:b] - new[a:b]
    short = new[b:]
    dur = value[b:]
    edit.dur[leaf[short < dur]] = short[short < dur]
    changed = int((edit.cut_before > 0).sum() + (edit.cut_after > 0).sum() + (short < dur).sum())
    if not changed:
        return None
    return Lever(
        "no_gc_stalls_own_time",
        "No allocation stalls (the code between calls as in calm stretches)",
        SOFTWARE,
        "only the threads that allocate stall (allocation stalls, GC assists): on the finding's instances "
        "each step's own time (the gap before a call, a span's time after its last call, a leaf span) in "
        "a stretch where it, or the instances' own times together, were over twice the quieter "
        "quarter's takes a calm stretch's (drawn from the run)",
        edit,
        pattern="gc_pause",
        params={"steps_retimed": changed},
    )
