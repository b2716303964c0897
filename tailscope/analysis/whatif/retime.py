"""Re-time every request of a run with some spans changed: the request's new latency is its critical
path through the changed spans, not a sum of stage means.

The model of a request: each span's children are laid out on the span's own timeline. A child
*depends on* every sibling that had ended when it started (within ABUT_NS: clocks' rounding; it
waited for them: sequential work), and not on siblings still running (parallel work). Between the
latest of those and the child's start lies a gap: the parent's own work or wait (serialisation,
scheduling slack, a queue without a span: the unattributed time). When spans change,

    new start of a child = max(new end of the siblings it depends on) + its gap (or, with no such
                           sibling, its old offset from the parent's start)
    new end of a parent  = max(new end of its children) + its trailing own time

bottom-up, so a parallel branch that did not change still holds its parent open, a shorter span on
the critical path moves everything after it, and time no child covers stays where it was unless a
change cuts it. A child that outlasts its parent was not awaited by it (fire and forget): it keeps
its clipped place whatever changes inside it (unless an edit removes it: 0). A detached child (a queue
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

AWAITED_COVER = 0.5  # a remote child outlasting its parent but covering this share of it was awaited
# a sibling ending this little after a span starts had ended (back-to-back steps whose times were
# rounded apart: Triton's QUEUE_END and COMPUTE_START a few hundred ns out of order)
ABUT_NS = 1_000


@dataclass
class Edit:
    """Changes to a run's spans, all in ns (float64, one value per span)."""

    dur: np.ndarray  # new duration; nan where unchanged
    cut_before: np.ndarray  # removed from the gap before the span in its parent's timeline
    cut_after: np.ndarray  # removed from the span's trailing own time (a leaf: from its duration)

    @classmethod
    def none(cls, n: int) -> Edit:
        return cls(np.full(n, np.nan), np.zeros(n), np.zeros(n))

    def is_empty(self) -> bool:
        return bool(np.isnan(self.dur).all() and not self.cut_before.any() and not self.cut_after.any())

    def merged(self, other: Edit) -> Edit:
        """Both edits at once: a span both set takes the shorter duration (each removed its own cause
        from it: with both removed it is no longer than either), cuts add up."""
        return Edit(
            np.fmin(self.dur, other.dur),
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
    awaited: np.ndarray  # a remote child outlasting its parent, covering at least AWAITED_COVER of it


@dataclass
class Level:
    """The children of one depth's parents, sorted by (parent, end): a child's dependencies are the
    siblings at positions up to `pred_idx` (inclusive) of that order, where `has_pred`."""

    kids: np.ndarray  # span indices in (parent, end) order
    rank: np.ndarray  # group number of each position
    starts: np.ndarray  # first position of each group
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


def _sort_by_group(grp: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Stable order by (grp, value), both non-negative int64: one argsort of a combined key when it
    fits in 63 bits."""
    stride = int(value.max(initial=0)) + 1
    if (int(grp.max(initial=0)) + 1) * stride < 2**62:
        return np.argsort(grp * stride + value, kind="stable")
    return np.lexsort((value, grp))


def _count_at_most(
    grp: np.ndarray, sorted_key: np.ndarray, k_grp: np.ndarray, limit: np.ndarray
) -> np.ndarray:
    """For each (grp, limit): how many entries of the (k_grp, sorted_key) order come before it or are
    in its group with a key <= limit (a position in that order)."""
    stride = int(max(sorted_key.max(initial=0), limit.max(initial=0))) + 1
    if (int(grp.max(initial=0)) + 1) * stride < 2**62:
        return np.searchsorted(k_grp * stride + sorted_key, grp * stride + limit, side="right")
    m = len(grp)
    values, groups = np.r_[sorted_key, limit], np.r_[k_grp, grp]
    is_query = np.r_[np.zeros(m, bool), np.ones(m, bool)]
    merged = np.lexsort((is_query, values, groups))
    keys_before = np.cumsum(~is_query[merged])
    out = np.empty(m, np.int64)
    out[merged[is_query[merged]] - m] = keys_before[is_query[merged]]
    return out


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
    child = np.nonzero(has_p)[0]
    parent_depth = frame.depth[parent[child]]
    for d in np.unique(parent_depth)[::-1].tolist():
        unsorted = child[parent_depth == d]
        # siblings sorted by (parent, end key): the dependencies of a child are a prefix of its group
        key = 2 * rel_end[unsorted] + (rel_end[unsorted] == rel_start[unsorted])
        kids = unsorted[_sort_by_group(parent[unsorted], key)]
        grp = parent[kids]
        first = np.r_[True, grp[1:] != grp[:-1]]
        rank = np.cumsum(first) - 1
        starts = np.nonzero(first)[0]
        s_key = 2 * rel_end[kids] + (rel_end[kids] == rel_start[kids])
        # the rounding's slack only for spans longer than twice it (a shorter sibling never counts
        # itself, and no two siblings each count the other)
        slack = np.where(rel_end[kids] - rel_start[kids] > 2 * ABUT_NS, ABUT_NS, 0)
        n_before = _count_at_most(grp, s_key, grp, 2 * (rel_start[kids] + slack))
        has_pred = n_before > starts[rank]
        pred_idx = np.maximum(n_before - 1, 0)
        old_max = _grouped_cummax(rel_end[kids], rank)
        gap[kids] = np.where(has_pred, rel_start[kids] - old_max[pred_idx], rel_start[kids])
        parents = grp[starts]
        last_child_end[parents] = np.maximum.reduceat(rel_end[kids], starts)
        levels.append(Level(kids, rank, starts, parents, has_pred, pred_idx))
    dur = (end - start).astype(np.int64)
    trailing = np.where(has_children, np.maximum(dur - last_child_end, 0), dur)
    # a remote callee's span (its end on another host's clock, after the body its caller's span
    # ended without) covering most of its caller's span was awaited; a local one outlasting it was not
    remote = frame.instance[p] != frame.instance
    awaited = (overhang > 0) & (rel_end - rel_start >= AWAITED_COVER * dur[p]) & has_p & remote
    # a child outlasting its parent by no more than the clocks' rounding ended with it (a format stamped
    # in µs: the step that ends as its last call ends, rounded apart): awaited, local or remote
    awaited |= (overhang > 0) & (overhang <= ABUT_NS) & has_p
    return Layout(parent, rel_start, rel_end, overhang, np.maximum(gap, 0), trailing, levels, has_children,
                  awaited)


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


def _dirty(level: Level, changed: np.ndarray, parent_changed: np.ndarray) -> Level | None:
    """The part of a level whose groups have a changed child or a changed parent (None: nothing)."""
    dirty = np.logical_or.reduceat(changed, level.starts) | parent_changed[level.parents]
    if not dirty.any():
        return None
    if dirty.all():
        return level
    keep = dirty[level.rank]
    pos = np.cumsum(keep) - 1
    idx = np.nonzero(keep)[0]
    rank = level.rank[idx]
    first = np.r_[True, rank[1:] != rank[:-1]]
    return Level(
        level.kids[idx],
        np.cumsum(first) - 1,
        pos[level.starts[dirty]],
        level.parents[dirty],
        level.has_pred[idx],
        pos[level.pred_idx[idx]],
    )


def _contribution(lay: Layout, kids: np.ndarray, new_dur: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """Each child's length in its parent's new timeline: its new duration, or for a child that
    outlasts its parent (not awaited) its old clipped place, unless the edit removes it (sets it to
    0: work no longer done, such as a callee's work for an attempt no longer made). A remote callee
    that outlasts its caller's span but covers at least half of it was awaited (`Layout.awaited`):
    the caller's span ended as the callee's last part began (a proxy's call ends at the response
    headers while the server sends the body; two hosts' clocks apart): the caller waits for the
    callee's new end less that last part."""
    old = lay.rel_end[kids] - lay.rel_start[kids]
    held = np.where(fixed[kids] & (new_dur[kids] == 0), 0, old)
    after = np.maximum(new_dur[kids] - lay.overhang[kids], 0)
    return np.where(lay.overhang[kids] > 0, np.where(lay.awaited[kids], after, held), new_dur[kids])


def retime(frame: TraceFrame, edit: Edit, lay: Layout | None = None) -> Retimed:
    """Every span's new duration under `edit` (see the module docstring). Only the sibling groups
    with something changed below them are laid out again."""
    lay = lay if lay is not None else layout(frame)
    if edit.is_empty():
        return Retimed(frame.dur.astype(np.int64), lay.rel_start.astype(np.int64))
    fixed = ~np.isnan(edit.dur)
    cut_after = np.rint(edit.cut_after).astype(np.int64)
    new_dur = np.where(lay.has_children, frame.dur, np.maximum(lay.trailing - cut_after, 0)).astype(np.int64)
    new_dur[fixed] = np.maximum(np.rint(edit.dur[fixed]), 0).astype(np.int64)
    new_rel = lay.rel_start.astype(np.int64).copy()
    gap = np.maximum(lay.gap - np.rint(edit.cut_before).astype(np.int64), 0)
    trailing = np.maximum(lay.trailing - cut_after, 0)
    parent_changed = (trailing != lay.trailing) & lay.has_children
    for full in lay.levels:
        kids = full.kids
        # a child that outlasts its parent was not awaited by it: it holds its old place, unless the
        # edit removes it (work abandoned at a deadline, no longer done)
        old = lay.rel_end[kids] - lay.rel_start[kids]
        contrib = _contribution(lay, kids, new_dur, fixed)
        changed = (contrib != old) | (gap[kids] != lay.gap[kids])
        level = _dirty(full, changed, parent_changed)
        if level is None:
            continue
        kids = level.kids
        contrib = _contribution(lay, kids, new_dur, fixed)
        g = gap[kids]
        # first guess: siblings one after the other (each waits for every sibling before it in end
        # order), where the new ends are running sums; exact for a sequential chain, and the rounds
        # below settle the rest (parallel branches, a child waiting for only some siblings)
        run = np.cumsum(g + contrib)
        ne = run - np.r_[np.int64(0), run[:-1]][level.starts][level.rank]
        ns = ne - contrib
        # every new end lies in [0, the group's sequential sum]: one offset per group for all rounds
        big = int(ne.max(initial=0)) + 1
        offset = level.rank * big if big * (int(level.rank[-1]) + 1) < 2**62 else None
        for _ in range(len(kids) + 1):
            if offset is not None:
                pm = np.maximum.accumulate(ne + offset) - offset
            else:
                pm = _grouped_cummax(ne, level.rank)
            ns_new = np.where(level.has_pred, pm[level.pred_idx], 0) + g
            ne_new = ns_new + contrib
            if np.array_equal(ne_new, ne):
                ns = ns_new
                break
            ns, ne = ns_new, ne_new
        new_rel[kids] = ns
        end_max = np.maximum.reduceat(ne, level.starts)
        open_parent = ~fixed[level.parents]
        parents = level.parents[open_parent]
        new_dur[parents] = end_max[open_parent] + trailing[parents]
        parent_changed[parents] |= new_dur[parents] != frame.dur[parents]
    return Retimed(new_dur, new_rel)


def request_latency(frame: TraceFrame, dur: np.ndarray, client_side: bool) -> np.ndarray:
    """Per request: the latency a set of span durations gives (the client wrapper's where asked and
    present, else the request root's)."""
    reqs = frame.requests
    top = np.where(reqs.client_span >= 0, reqs.client_span, reqs.root) if client_side else reqs.root
    return dur[top].astype(np.float64)


def unit_latency(frame: TraceFrame, timed: Retimed | None, lay: Layout | None, client_side: bool
                 ) -> np.ndarray:
    """The latencies a run's percentiles are taken over: per request (`request_latency`), or for a
    batch consumer's units per message, from its publish to the end of its own processing in the
    batch (`Requests.message_span`), so that runs whose batches the load formed differently compare
    like for like. `timed` None: as measured."""
    reqs = frame.requests
    if reqs.message_span is None:
        return request_latency(frame, frame.dur if timed is None else timed.dur, client_side)
    span = reqs.message_span
    if timed is None:
        end = frame.start[span] + frame.dur[span]
    else:
        assert lay is not None
        end = timed.absolute_start(frame, lay)[span] + timed.dur[span]
    return (end - reqs.message_sent).astype(np.float64)


def unit_weight(frame: TraceFrame) -> np.ndarray | None:
    """The weight of each latency `unit_latency` gives (a message stands for what its unit does)."""
    reqs = frame.requests
    if reqs.weight is None or reqs.message_span is None:
        return reqs.weight
    return reqs.weight[frame.request[reqs.message_span]]
