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


WAIT_OVER_MEDIAN = 2.0  # a checkout gap over twice the median gap is a wait for the pool


def _wait_before_first_use(x: Inputs, spans: np.ndarray, edit: Edit) -> None:
    """A pooled connection checked out with no span of its own (ActiveRecord's lease at a request's
    first query, held to its end): the wait shows as the gap before the first span of the name in its
    parent, not in the spans. Each such gap over twice the median (a wait) is cut to one drawn from
    the lower half. Only for lock spans with no children (a query: the wait comes before it)."""
    lay = x.lay
    leaf = spans[~lay.has_children[spans]]
    if len(leaf) < 20:
        return
    order = np.lexsort((x.frame.start[leaf], lay.parent[leaf]))
    leaf = leaf[order]
    first = leaf[np.r_[True, lay.parent[leaf][1:] != lay.parent[leaf][:-1]] & (lay.parent[leaf] >= 0)]
    if len(first) < 20:
        return
    gap = lay.gap[first].astype(np.float64)
    median = float(np.median(gap))
    waited = gap > WAIT_OVER_MEDIAN * median
    if not waited.any():
        return
    new = _draw(x.rng(29), gap[gap <= median], int(waited.sum()))
    edit.cut_before[first[waited]] += np.maximum(gap[waited] - new, 0.0)


def _lock_spans(x: Inputs, name: str | None) -> np.ndarray:
    """The spans a lock finding names; where they are a process's entry spans (SERVER spans called
    from another instance or from nothing), the lock is the process's (a connection pool, a mutex)
    and every request it serves waits for it: every entry SERVER span of the same service(s), any
    route."""
    from tailscope.analysis.diagnosis.frame import KIND_SERVER

    spans = x.spans_named(name)
    f = x.frame
    if len(spans) == 0:
        return spans
    par = f.parent
    entry = (f.kind == KIND_SERVER) & (f.request >= 0)
    entry &= (par < 0) | (f.instance[np.maximum(par, 0)] != f.instance)
    if not entry[spans].all():
        return spans
    return np.nonzero(entry & np.isin(f.service, np.unique(f.service[spans])))[0]


def no_lock_wait(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    name = finding.get("span_name")
    spans = _lock_spans(x, name)
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
    _wait_before_first_use(x, spans, edit)
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


HOLD_TOLERANCE_NS = 100_000  # a step that starts this close to the lock span's end came after it


def _holds(x: Inputs, spans: np.ndarray) -> np.ndarray:
    """The steps run while the lock is held: the later siblings of each lock span in its parent (a
    transaction's statements after BEGIN; the rest of the request where the connection is taken at
    its start and given back at its end), and the lock span's own children (a repository call that
    waits for a pooled connection, then runs its query on it)."""
    lay = x.lay
    parent = lay.parent[spans]
    ok = parent >= 0
    lock_end = np.full(len(x.frame), np.iinfo(np.int64).max)
    np.minimum.at(lock_end, parent[ok], lay.rel_end[spans[ok]].astype(np.int64))
    kid = np.nonzero(np.isin(lay.parent, parent[ok]))[0]
    after = lay.rel_start[kid] >= lock_end[lay.parent[kid]] - HOLD_TOLERANCE_NS
    inside = np.nonzero(np.isin(lay.parent, spans))[0]
    return np.union1d(kid[after & ~np.isin(kid, spans)], inside)


def pool_held_as_calm(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """No wait for the lock, and the lock held as briefly as in calm stretches: each step run while
    it is held (`_holds`), in a stretch of the run whose mean time for that step is over twice the
    quieter quarter's (queue_levers._calm), takes the time of the same step in a calm stretch (drawn),
    and so does each wait for the lock in a stretch where the waits were long.
    Where the holders got slow (a commit waiting on a throttled disk), that is what made the callers
    wait; where they did not (a pool made smaller), nothing changes beyond `no_lock_wait` (None)."""
    from tailscope.analysis.whatif.queue_levers import _calm

    base = no_lock_wait(x, finding)
    name = finding.get("span_name")
    if base is None:
        return None
    f = x.frame
    edit = Edit(base.edit.dur.copy(), base.edit.cut_before.copy(), base.edit.cut_after.copy())
    spans = _lock_spans(x, name)
    holds = _holds(x, spans)
    rng = x.rng(27)
    redrawn = 0
    for code in np.unique(f.name[holds]).tolist():
        steps = holds[f.name[holds] == code]
        calm = _calm(f.start[steps], f.dur[steps].astype(np.float64))
        if calm is None:
            continue
        rows = steps[~calm]
        edit.dur[rows] = np.minimum(_draw(rng, f.dur[steps[calm]], len(rows)), f.dur[rows])
        redrawn += len(rows)
    if redrawn == 0:
        return None
    # and the waits of those stretches: a caller alone on its instance waited too (the pool is
    # shared by every instance: PgBouncer's, a database's connection limit)
    calm = _calm(f.start[spans], f.dur[spans].astype(np.float64), deep=True)
    if calm is not None:
        rows = spans[~calm]
        edit.dur[rows] = np.fmin(edit.dur[rows], np.minimum(
            _draw(rng, f.dur[spans[calm]], len(rows)), f.dur[rows]))
    return Lever(
        f"no_lock_wait_held_as_calm:{name}",
        f"No lock wait, the lock held as briefly as in calm stretches ('{name}')",
        SOFTWARE,
        f"no '{name}' waits (as 'no lock wait'), and each step run while the lock is held (the later "
        "steps of the span's parent) in a stretch where that step was slow takes the time of one in a "
        "calm stretch (drawn from the run): the holders' slowness fixed, which made the others wait",
        edit,
        pattern="lock_contention",
        span_name=name,
        params={"holds_redrawn": redrawn},
    )


def waits_as_calm(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A pool held by a client no trace shows (a job runner's transactions on the same connections):
    no span of the name is seen ahead of a wait, so `no_lock_wait` keeps the waits, and no traced
    holder got slow, so `pool_held_as_calm` has nothing to fix; the waits come in the stretches where
    the other client holds the pool. Each span of a stretch whose mean time is over twice the quieter
    quarter's takes the time of one in a calm stretch (drawn from the run), on top of `no_lock_wait`.
    None where the holders' lever applies or every stretch is calm."""
    from tailscope.analysis.whatif.queue_levers import _calm

    if pool_held_as_calm(x, finding) is not None:
        return None
    base = no_lock_wait(x, finding)
    name = finding.get("span_name")
    if base is None:
        return None
    f = x.frame
    spans = _lock_spans(x, name)
    calm = _calm(f.start[spans], f.dur[spans].astype(np.float64), deep=True)
    if calm is None:
        return None
    edit = Edit(base.edit.dur.copy(), base.edit.cut_before.copy(), base.edit.cut_after.copy())
    rows = spans[~calm]
    edit.dur[rows] = np.fmin(edit.dur[rows], np.minimum(
        _draw(x.rng(32), f.dur[spans[calm]], len(rows)), f.dur[rows]))
    return Lever(
        f"no_lock_wait_as_calm:{name}",
        f"No lock wait, the pool as in calm stretches ('{name}')",
        SOFTWARE,
        f"no '{name}' waits (as 'no lock wait'), and each '{name}' of a stretch whose mean time is over "
        "twice the quieter quarter's takes the time of one in a calm stretch (drawn from the run): the "
        "pool no longer held by a client the trace does not show",
        edit,
        pattern="lock_contention",
        span_name=name,
        params={"disturbed_share": round(float((~calm).mean()), 4)},
    )


WAIT_WORDS = ("queue", "wait")  # an attribute naming the time a span spent waiting (Ecto's queue_time)
UNITS_NS = (1e9, 1e6, 1e3, 1.0)  # s, ms, us, ns: the largest under which the values fit the spans
FITS = 0.95  # ... for this share of the spans


def stated_wait(x: Inputs, spans: np.ndarray) -> np.ndarray | None:
    """Per span of `spans` (one name): the wait it states in an attribute (a pool's checkout time:
    Ecto's `queue_time_microseconds`, a client's `wait_time`), in ns, NaN where a span states none;
    the unit the largest under which the values fit inside the spans' durations. None where no
    attribute of the name states one."""
    from tailscope.analysis.diagnosis.attributes import numeric_attributes

    f = x.frame
    code = int(f.name[spans[0]])
    best = None
    for key, (idx, values) in numeric_attributes(f, code, 20).items():
        if not any(w in key.lower() for w in WAIT_WORDS) or (values < 0).any():
            continue
        inside = idx[np.isin(idx, spans)]
        vals = values[np.isin(idx, spans)]
        for unit in UNITS_NS:
            if len(inside) and (vals * unit <= f.dur[inside] * 1.01 + 1000).mean() >= FITS:
                if best is None or len(inside) > len(best[0]):
                    best = (inside, vals * unit)
                break
    if best is None:
        return None
    out = np.full(len(f), np.nan)
    out[best[0]] = best[1]
    return out[spans]


def no_stated_wait(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A lock span that states its own wait (a pool checkout timed by the client library): the wait
    it states over the lower half of the stated waits is removed, whoever held the pool (a client the
    trace does not show included). None where the spans state no wait."""
    name = finding.get("span_name")
    spans = _lock_spans(x, name)
    if len(spans) < 20:
        return None
    wait = stated_wait(x, spans)
    if wait is None:
        return None
    f = x.frame
    has = np.isfinite(wait)
    calm = wait[has][wait[has] <= np.median(wait[has])]
    rows = spans[has]
    drawn = _draw(x.rng(33), calm, len(rows))
    edit = Edit.none(len(f))
    edit.dur[rows] = f.dur[rows] - np.clip(wait[has] - drawn, 0.0, f.dur[rows])
    return Lever(
        f"no_lock_wait_stated:{name}",
        f"No lock wait, as the spans state it ('{name}')",
        SOFTWARE,
        f"each '{name}' loses the wait its own attribute states, down to one of the lower half of the "
        "stated waits (drawn from the run): the pool free whoever held it",
        edit,
        pattern="lock_contention",
        span_name=name,
    )


HOLDER_LONG = 2.0  # a holder's query over this many times its name's median held the pool long
HOLDERS_COVER = 0.5  # ... and the long holders cover at least this share of the waited time


def _first_children(x: Inputs, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the lock spans that have a child, the earliest child of each)."""
    first = np.full(len(x.frame), -1, np.int64)
    kid = np.nonzero(np.isin(x.lay.parent, spans))[0]
    kid = kid[np.argsort(-x.lay.rel_start[kid], kind="stable")]
    first[x.lay.parent[kid]] = kid  # the earliest child written last
    has = spans[first[spans] >= 0]
    return has, first[has]


def slow_holders(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A pool drained by slow holders in other requests (another endpoint's queries that hold the
    process' connections for seconds): the lock span waits for a connection (the gap before its
    first child, the query it runs on it), and the connections are held by the queries of that
    child's name on the same instance, any request. Where the long ones (over HOLDER_LONG x the
    name's median) cover at least HOLDERS_COVER of the waited time, each takes the time of a usual
    query of the name (drawn from the run: the run shows no calm time for the slow statement
    itself), and the waits go as with `no_lock_wait`, the holders' own waits for the pool too (a
    gap before one over WAIT_OVER_MEDIAN x its caller's median gap, cut to a usual one). None where
    no long holder covers the waits."""
    from tailscope.analysis.whatif.blocked_workers import _covered, _merged

    base = no_lock_wait(x, finding)
    name = finding.get("span_name")
    if base is None:
        return None
    f, lay = x.frame, x.lay
    spans = _lock_spans(x, name)
    has, child = _first_children(x, spans)
    if len(has) < 20:
        return None
    codes = np.unique(f.name[child])
    insts = np.unique(f.instance[spans])
    holders = np.nonzero(np.isin(f.name, codes) & np.isin(f.instance, insts))[0]
    long = holders[f.dur[holders] > HOLDER_LONG * np.median(f.dur[holders])]
    if len(long) == 0:
        return None
    gap = lay.rel_start[child].astype(np.float64)
    waited = gap > WAIT_OVER_MEDIAN * np.median(gap)
    if not waited.any():
        return None
    b = (f.start[child[waited]]).astype(np.float64)
    a = b - gap[waited]
    inside = 0.0
    for i in np.unique(f.instance[has[waited]]).tolist():
        mine = long[f.instance[long] == i]
        on = f.instance[has[waited]] == i
        if len(mine) == 0:
            continue
        starts, ends, before = _merged(f.start[mine], f.start[mine] + f.dur[mine])
        inside += float((_covered(b[on], starts, ends, before) - _covered(a[on], starts, ends, before)).sum())
    if inside < HOLDERS_COVER * float((b - a).sum()):
        return None
    usual = f.dur[holders[f.dur[holders] <= HOLDER_LONG * np.median(f.dur[holders])]]
    edit = Edit(base.edit.dur.copy(), base.edit.cut_before.copy(), base.edit.cut_after.copy())
    edit.dur[long] = np.fmin(edit.dur[long], _draw(x.rng(43), usual, len(long)))
    # the holders waited for the pool too (another endpoint's queries): per caller (the parent's
    # name), a gap before a query over WAIT_OVER_MEDIAN x the caller's median is cut to a usual one
    other = holders[~np.isin(lay.parent[holders], spans) & (lay.parent[holders] >= 0)]
    for code in np.unique(f.name[lay.parent[other]]).tolist():
        mine = other[f.name[lay.parent[other]] == code]
        g = lay.gap[mine].astype(np.float64)
        median = float(np.median(g))
        over = g > WAIT_OVER_MEDIAN * median
        if over.any() and (~over).sum() >= 20:
            drawn = _draw(x.rng(44), g[g <= median], int(over.sum()))
            edit.cut_before[mine[over]] += np.maximum(g[over] - drawn, 0.0)
    return Lever(
        f"no_lock_wait_holders:{name}",
        f"No lock wait, the pool's slow holders at a usual query's time ('{name}')",
        SOFTWARE,
        f"'{name}' waits for a connection while long queries of the same pool (any request, the same "
        "process) hold it: each long one takes a usual query's time (drawn from the run), and the waits "
        "go (as 'no lock wait')",
        edit,
        pattern="lock_contention",
        span_name=name,
        params={"long_holders": len(long)},
    )
