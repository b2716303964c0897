"""The cold-start lever: an instance's first work at a warm instance's speed (see levers.py).

Which work was cold: where the diagnosis' finding says how many requests per instance warmed up, the
first that many requests of each request-root instance (every span of them); else (a finding given
without that count, a cold instance that is a callee: a model server's pod added mid-run, a worker
process forked again) per instance from the finding's span itself: an instance's leading spans of that
name while they run slower than the name's warm time, and every span of that instance started before
its warm-up ended."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, _draw
from tailscope.analysis.whatif.retime import Edit

MIN_WARM = 20  # warm spans of a name to draw an own time from
COLD_RATIO = 1.5  # a leading span slower than this many times the name's warm median is still cold
COLD_WINDOW = 5  # ... judged on the running median of this many spans (one slow span is noise)


def prewarmed(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    f = x.frame
    stats = finding.get("evidence", {}).get("stats", {})
    warm = int(stats.get("warmup_requests_per_instance") or 0)
    if warm > 0:
        early_req = f.requests.index_on_instance < warm
        early = (f.request >= 0) & early_req[np.maximum(f.request, 0)]
        what = f"first {warm} requests per instance"
    else:
        early = cold_spans(x, finding.get("span_name"))
        if early is None:
            return None
        what = f"{int(early.sum())} spans of instances warming up"
    leaf = ~x.lay.has_children & (f.request >= 0)
    edit = Edit.none(len(f))
    rng = x.rng(5)
    for code in np.unique(f.name[leaf & early]).tolist():
        pool = f.dur[leaf & ~early & (f.name == code)]
        spans = np.nonzero(leaf & early & (f.name == code))[0]
        if len(pool):
            edit.dur[spans] = _draw(rng, pool, len(spans))
    _warm_forwards_by_size(x, early, edit, rng)
    _warm_own_time(x, early, edit, rng)
    return Lever(
        "prewarmed",
        f"Cold starts pre-warmed ({what})",
        SOFTWARE,
        "each span of an instance's first requests takes the time of the same span once warm, and its "
        "own time around its children (lazy initialisation, interpreted code) a warm one's (drawn from "
        "the run); the queue is replayed",
        edit,
        pattern="cold_start",
        requeue=True,
        params={"warmup_requests": warm} if warm > 0 else {"cold_spans": int(early.sum())},
    )


def cold_spans(x: Inputs, name: str | None) -> np.ndarray | None:
    """Per span: whether it ran while its instance warmed up, read from the finding's span `name`:
    on each instance, its leading spans of that name while their running median (COLD_WINDOW) is over
    COLD_RATIO times the name's warm median (the later half of every instance's spans), then while each
    one is, and every span of the instance that started before the first warm one. None where no
    instance starts cold."""
    f = x.frame
    spans = x.spans_named(name)
    if len(spans) < 2 * MIN_WARM:
        return None
    inst = f.instance[spans]
    order = np.lexsort((f.start[spans], inst))
    spans, inst = spans[order], inst[order]
    first = np.r_[True, inst[1:] != inst[:-1]]
    starts = np.nonzero(first)[0]
    ends = np.r_[starts[1:], len(spans)]
    later = np.concatenate([spans[a + (b - a) // 2: b] for a, b in zip(starts, ends, strict=True)])
    limit = COLD_RATIO * float(np.median(f.dur[later]))
    out = np.zeros(len(f), bool)
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        d = f.dur[spans[a:b]].astype(np.float64)
        k = min(COLD_WINDOW, len(d))
        running = np.array([np.median(d[j: j + k]) for j in range(min(len(d), 4 * MIN_WARM))])
        warm_at = int(np.argmax(running <= limit)) if (running <= limit).any() else len(d)
        while 0 < warm_at < len(d) and d[warm_at] > limit:  # the window's tail still cooling
            warm_at += 1
        if warm_at == 0:
            continue
        until = f.start[spans[a + warm_at]] if a + warm_at < b else np.iinfo(np.int64).max
        i = inst[a]
        out |= (f.instance == i) & (f.start < until) & (f.request >= 0)
    return out if out.any() else None


def _warm_own_time(x: Inputs, early: np.ndarray, edit: Edit, rng) -> None:
    """A warm-up span's own time (a parent's time before each child it runs on its own instance,
    and after its last child: where a cold process initialises lazily and runs interpreted code)
    takes the same span's own time in a warm request, drawn from the run. A child on another
    instance keeps its gap (the network and the wait for a thread: their own levers')."""
    f, lay = x.frame, x.lay
    inside = f.request >= 0
    parent = np.maximum(lay.parent, 0)
    local = inside & (lay.parent >= 0) & (f.instance == f.instance[parent])
    for values, rows, cut in ((lay.gap, local, edit.cut_before),
                              (lay.trailing, inside & lay.has_children, edit.cut_after)):
        for code in np.unique(f.name[rows & early]).tolist():
            pool = values[rows & ~early & (f.name == code)]
            spans = np.nonzero(rows & early & (f.name == code))[0]
            if len(pool) >= MIN_WARM:
                cut[spans] = values[spans] - _draw(rng, pool, len(spans))


def _warm_forwards_by_size(x: Inputs, early_span: np.ndarray, edit: Edit, rng) -> None:
    """A warm-up forward pass takes the time of a warm batch of the same size (a batch's cost grows
    with its size: drawn from all sizes, a warm-up batch of 8 would cost what a batch of 1 does),
    where the run has warm batches of that size."""
    s = x.served
    if s is None:
        return
    early = early_span[s.forward]
    for k in np.unique(s.size[early]).tolist():
        pool = x.frame.dur[s.forward[~early & (s.size == k)]]
        rows = np.nonzero(early & (s.size == k))[0]
        if len(pool):
            edit.dur[s.forward[rows]] = _draw(rng, pool, len(rows))
