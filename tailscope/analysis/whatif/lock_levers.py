"""The lock lever: no wait for a lock or a pooled resource (see levers.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, _draw
from tailscope.analysis.whatif.retime import Edit


def _ahead(f: TraceFrame, spans: np.ndarray) -> np.ndarray:
    """Same-name spans on the same instance started earlier and still running at each start."""
    s, e, inst = f.start[spans], f.start[spans] + f.dur[spans], f.instance[spans]
    out = np.zeros(len(spans), np.int64)
    for i in np.unique(inst).tolist():
        sel = np.nonzero(inst == i)[0]
        starts = np.sort(s[sel])
        ends = np.sort(e[sel])
        started = np.searchsorted(starts, s[sel], side="left")
        ended = np.searchsorted(ends, s[sel], side="right")
        out[sel] = np.maximum(started - ended, 0)
    return out


def _wait_before_first_child(x: Inputs, spans: np.ndarray, ahead: np.ndarray, edit: Edit) -> None:
    """A lock held past the span that takes it (a pooled connection held to the response): a span
    can wait with no other of its name running. Where the spans have children, the wait is the gap
    before the first (the query starts once a connection is free): every gap over the lower half of
    the gaps of spans that found none ahead is cut to one drawn from that half."""
    first = np.full(len(x.frame), -1, np.int64)
    kid = np.nonzero(np.isin(x.lay.parent, spans))[0]
    kid = kid[np.argsort(-x.lay.rel_start[kid], kind="stable")]
    first[x.lay.parent[kid]] = kid  # the earliest child written last
    has = first[spans] >= 0
    if has.sum() < 20:
        return
    child = first[spans[has]]
    gap = x.lay.rel_start[child].astype(np.float64)
    free = gap[ahead[has] == 0]
    if len(free) < 20:
        return
    free = free[free <= np.median(free)]
    new = _draw(x.rng(4), free, len(child))
    cut = np.maximum(gap - new, 0.0)
    edit.dur[spans[has]] = np.nan  # the subtree re-timed, not a drawn duration
    edit.cut_before[child] = cut


def no_lock_wait(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    name = finding.get("span_name")
    spans = x.spans_named(name)
    if len(spans) == 0:
        return None
    f = x.frame
    ahead = _ahead(f, spans)
    free = f.dur[spans[ahead == 0]]
    if len(free) == 0:
        return None
    edit = Edit.none(len(f))
    busy = spans[ahead > 0]
    edit.dur[busy] = np.minimum(_draw(x.rng(3), free, len(busy)), f.dur[busy])
    _wait_before_first_child(x, spans, ahead, edit)
    return Lever(
        f"no_lock_wait:{name}",
        f"No lock wait ('{name}')",
        SOFTWARE,
        f"each '{name}' that found others in it takes the time of one that found it free "
        "(drawn from the run)",
        edit,
        pattern="lock_contention",
        span_name=name,
    )
