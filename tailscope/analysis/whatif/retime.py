"""Re-time every request of a run with some spans changed: the request's new latency is its critical
path through the changed spans, not a sum of stage means.

The model of a request: each span's children are laid out on the span's own timeline. A child
*depends on* every sibling that had ended when it started (it waited for them: sequential work),
and not on siblings still running (parallel work). Between the latest of those and the child's
start lies a gap: the parent's own work or wait (serialisation, scheduling slack, a queue without a
span: the unattributed time). When spans change,

    new start of a child = max(new end of the siblings it depends on) + its gap (or, with no such
                           sibling, its old offset from the parent's start)
    new end of a parent  = max(new end of its children) + its trailing own time

bottom-up, so a parallel branch that did not change still holds its parent open, a shorter span on
the critical path moves everything after it, and time no child covers stays where it was unless a
change cuts it. A child that outlasts its parent was not awaited by it (fire and forget): it keeps
its clipped place whatever changes inside it. A detached child (a queue
consumer starting after its producer ended) is laid out in the ancestor that holds it
(`frame.excl_parent`), as the exclusive times are.

An `Edit` says what changes: a span's new duration (its subtree is then not looked at), time cut
from the gap before a span (negative: added), time cut from a span's trailing own time (for a leaf:
from its duration). Everything is vectorised per depth; the layout of one level's siblings is a
longest path solved by a few rounds of prefix maxima (as many rounds as the longest chain of
sequential siblings).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame


@dataclass
class Edit:
    """Changes to a run's spans, all in ns (float64, one value per span)."""

    dur: np.ndarray  # new duration; nan where unchanged
    cut_before: np.ndarray  # removed from the gap before the span in its parent's timeline
    cut_after: np.ndarray  # removed from the span's trailing own time (a leaf: from its duration)

    @classmethod
    def none(cls, n: int) -> Edit:
        return cls(np.full(n, np.nan), np.zeros(n), np.zeros(n))

    def merged(self, other: Edit) -> Edit:
        """Both edits at once (a duration set by `other` wins)."""
        return Edit(
            np.where(np.isnan(other.dur), self.dur, other.dur),
            self.cut_before + other.cut_before,
            self.cut_after + other.cut_after,
        )


@dataclass
class Layout:
    """The old layout of every span in its parent's timeline (computed once per frame)."""

    parent: np.ndarray  # the parent a span is laid out in (-1: a top span)
    rel_start: np.ndarray  # start relative to the parent's start, clipped into the parent
    rel_end: np.ndarray
    overhang: np.ndarray  # the part of the span outside its parent (clipped away)
    gap: (
        np.ndarray
    )  # gap before the span (after the latest sibling it depends on, or from the parent's start)
    trailing: np.ndarray  # own time after the last child ends (a leaf: its duration)
    levels: list[Level]  # the parents' levels, deepest first
    has_children: np.ndarray


@dataclass
class Level:
    """The children of one depth's parents, sorted by (parent, end): a child's dependencies are the
    siblings before `pred_idx` (inclusive) in that order, where `has_pred`."""

    kids: np.ndarray
    korder: np.ndarray  # kids[korder] is in (parent, end) order
    rank: np.ndarray  # group number of each position of that order
    starts: np.ndarray  # first position of each group in that order
    parents: np.ndarray  # the parent of each group
    has_pred: np.ndarray
    pred_idx: np.ndarray


def _grouped_cummax(values: np.ndarray, group_rank: np.ndarray) -> np.ndarray:
    """Running maximum of int64 `values` restarting at each group (groups contiguous, ranks 0..k)."""
    if len(values) == 0:
        return values
    low = int(values.min())
    shifted = values - low
    big = int(shifted.max()) + 1
    if big * (int(group_rank[-1]) + 1) < 2**62:
        offset = group_rank.astype(np.int64) * big
        return np.maximum.accumulate(shifted + offset) - offset + low
    import pandas as pd  # a run with hour-long parents and many groups: no room for offsets

    return pd.Series(values).groupby(group_rank).cummax().to_numpy()


def layout(frame: TraceFrame) -> Layout:
    """Each span's place in its parent's timeline, and per level the sibling dependencies."""
    n = len(frame)
    parent = frame.excl_parent.astype(np.int64)
    start, end = frame.start.astype(np.int64), (frame.start + frame.dur).astype(np.int64)
    has_p = parent >= 0
    p = np.maximum(parent, 0)
    cs = np.where(has_p, np.clip(start, start[p], end[p]), start)
    ce = np.where(has_p, np.clip(end, start[p], end[p]), end)
    rel_start = np.where(has_p, cs - start[p], 0)
    rel_end = np.where(has_p, ce - start[p], end - start)
    overhang = (end - start) - (ce - cs)
    has_children = np.bincount(parent[has_p], minlength=n) > 0 if n else np.zeros(0, bool)
    gap = rel_start.astype(np.int64).copy()
    last_child_end = np.zeros(n, np.int64)
    levels = []
    depth = frame.depth
    child = np.nonzero(has_p)[0]
    parent_depth = depth[parent[child]]
    for d in np.unique(parent_depth)[::-1].tolist():
        kids = child[parent_depth == d]
        grp = parent[kids]
        # siblings sorted by (parent, end key): preds of a child are a prefix of its group
        key = 2 * rel_end[kids] + (rel_end[kids] == rel_start[kids])
        korder = np.lexsort((key, grp))
        k_grp = grp[korder]
        first = np.r_[True, k_grp[1:] != k_grp[:-1]]
        rank = np.cumsum(first) - 1
        # how many siblings end before each child starts: merge keys with thresholds
        m = len(kids)
        values = np.r_[key[korder], 2 * rel_start[kids]]
        groups = np.r_[k_grp, grp]
        is_query = np.r_[np.zeros(m, bool), np.ones(m, bool)]
        merged = np.lexsort((is_query, values, groups))
        keys_before = np.cumsum(~is_query[merged])
        n_before = np.empty(m, np.int64)
        n_before[merged[is_query[merged]] - m] = keys_before[is_query[merged]]
        group_start = np.searchsorted(k_grp, grp, side="left")
        has_pred = n_before > group_start
        pred_idx = np.maximum(n_before - 1, 0)
        old_max = _grouped_cummax(rel_end[kids][korder], rank)
        gap[kids] = np.where(has_pred, rel_start[kids] - old_max[pred_idx], rel_start[kids])
        starts = np.nonzero(first)[0]
        parents = k_grp[starts]
        last_child_end[parents] = np.maximum.reduceat(rel_end[kids][korder], starts)
        levels.append(Level(kids, korder, rank, starts, parents, has_pred, pred_idx))
    dur = (end - start).astype(np.int64)
    trailing = np.where(has_children, np.maximum(dur - last_child_end, 0), dur)
    return Layout(parent, rel_start, rel_end, overhang, np.maximum(gap, 0), trailing, levels, has_children)


@dataclass
class Retimed:
    """New durations and new starts relative to the parent of every span (int64 ns)."""

    dur: np.ndarray
    rel_start: np.ndarray

    def absolute_start(self, frame: TraceFrame, lay: Layout) -> np.ndarray:
        """New start of every span in wall time: a top span keeps its start, the rest follow it."""
        out = frame.start.astype(np.int64).copy()
        child = np.nonzero(lay.parent >= 0)[0]
        depth = frame.depth[child]
        for d in np.unique(depth).tolist():
            sel = child[depth == d]
            out[sel] = out[lay.parent[sel]] + self.rel_start[sel]
        return out


def retime(frame: TraceFrame, edit: Edit, lay: Layout | None = None) -> Retimed:
    """Every span's new duration under `edit` (see the module docstring)."""
    lay = lay if lay is not None else layout(frame)
    fixed = ~np.isnan(edit.dur)
    new_dur = np.where(
        lay.has_children, 0, np.maximum(lay.trailing - np.rint(edit.cut_after).astype(np.int64), 0)
    ).astype(np.int64)
    new_dur[fixed] = np.maximum(np.rint(edit.dur[fixed]), 0).astype(np.int64)
    new_rel = lay.rel_start.astype(np.int64).copy()
    gap = np.maximum(lay.gap - np.rint(edit.cut_before).astype(np.int64), 0)
    trailing = np.maximum(lay.trailing - np.rint(edit.cut_after).astype(np.int64), 0)
    for level in lay.levels:
        kids, korder = level.kids, level.korder
        # a child that outlasts its parent was not awaited by it: it holds its old place
        contrib = np.where(lay.overhang[kids] > 0, lay.rel_end[kids] - lay.rel_start[kids], new_dur[kids])
        g = gap[kids]
        ns = lay.rel_start[kids].astype(np.int64)
        ne = ns + contrib
        for _ in range(len(kids) + 1):
            pm = _grouped_cummax(ne[korder], level.rank)
            ns_new = np.where(level.has_pred, pm[level.pred_idx], 0) + g
            ne_new = ns_new + contrib
            if np.array_equal(ne_new, ne):
                ns = ns_new
                break
            ns, ne = ns_new, ne_new
        new_rel[kids] = ns
        end_max = np.maximum.reduceat(ne[korder], level.starts)
        open_parent = ~fixed[level.parents]
        parents = level.parents[open_parent]
        new_dur[parents] = end_max[open_parent] + trailing[parents]
    return Retimed(new_dur, new_rel)


def request_latency(frame: TraceFrame, dur: np.ndarray, client_side: bool) -> np.ndarray:
    """Per request: the latency a set of span durations gives (the client wrapper's where asked and
    present, else the request root's)."""
    reqs = frame.requests
    top = np.where(reqs.client_span >= 0, reqs.client_span, reqs.root) if client_side else reqs.root
    return dur[top].astype(np.float64)
