"""Calls that end at a deadline, re-timed when a fix removes what held them past it.

A call made with a deadline (an ask timeout, a request timeout) ends when its answer comes or when the
deadline expires, whichever is first; at the expiry the caller goes on (a fallback, an error). The
trace shows the expired calls as a spike of durations at one value D: the model reads a span name as
deadline-capped where, among its calls far above its median (over 4x), at least `MIN_CAPPED` lie within
`SPREAD` of one value D at the name's top, at 3x the density of the band just below it, hardly any
outlast it, and answered calls lead up to it (at least `MIN_CAPPED` between 4x the median and D: a
deadline cuts work of every length; a fixed slow path at one value is none).
Their true work is not seen (censored at D); the callee's work may have no span at all (an actor's
mailbox, an untraced store), so a lever that removes a stall in the callee cannot shorten them.

The model of the fix: a call of a capped name that was in flight while the lever removed a material
stall somewhere in the run (a span, not the call itself nor a span enclosing such calls, shortened by
at least `max(MIN_CUT_NS, CUT_SHARE x D)`: a collection, a cold process, a recovery; work inside a
capped call is that call's own, which the lever re-times itself) was held by what the fix removes,
where the disturbed calls expired at least 3x as often as the undisturbed ones (a deadline that cuts
calls as often in calm stretches is not the stall's); it takes the time of a call of its name that
was in flight during no such stall (drawn from the run, seeded): answered calls end when their work
ends, expired ones no longer wait for the deadline, and the parent's steps after it move up (the
re-timing's critical path). Assumptions:
the calls in flight during a stall are a sample of the name's calls (the stalled callee is not known:
the calls that did not wait on it take calm times too, as they had); the undisturbed calls are how the
name behaves without the cause; a deadline with no stall removed under it stays (the deadline still
cuts calls that are slow for another reason). Where the run has too few undisturbed calls of the name
(under `MIN_CALM`) nothing is re-timed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.whatif.retime import Edit, Layout

SPREAD = 0.02  # the expired calls of a name within this share of D
FAR = 4.0  # only durations this many times the name's median can be a deadline's
MIN_CAPPED = 5  # this many calls at one value: a deadline
SPIKE = 3.0  # ... at this many times the density (per unit of duration) of the band of 4 spreads below
OUTLAST_SHARE = 0.1  # at most this many (a share of those at D) outlast D by more than the spread
MIN_CUT_NS = 2_000_000  # a stall the lever removed: a span shortened by at least this much ...
CUT_SHARE = 0.05  # ... and this share of the deadline
MIN_CALM = 20  # undisturbed calls of the name needed to draw from
CONCENTRATED = 3.0  # the disturbed calls expire this many times as often as the undisturbed



@dataclass(frozen=True)
class Capped:
    span: np.ndarray  # a call of a deadline-capped name, or the step after an untraced call's wait
    gap: np.ndarray  # per entry: the wait is the step's gap (an untraced call), not the span itself
    deadline: np.ndarray  # per entry: its name's deadline D (ns)
    expired: np.ndarray  # per entry: ended at the deadline
    value: np.ndarray  # per entry: what the fix re-times (the call's duration, the step's gap), ns
    window: tuple[np.ndarray, np.ndarray]  # per entry: when the call was in flight
    encloses: np.ndarray  # per span: contains an entry (its ancestors): no evidence of a stall
    inside: np.ndarray  # per span: inside a capped call (its own work, re-timed by the lever itself)


def _deadline(d: np.ndarray) -> float | None:
    """The deadline D that caps the values `d` (one name's), None where none does."""
    if len(d) < MIN_CAPPED * 4:
        return None
    hi = np.sort(d[d > FAR * np.median(d)])
    if len(hi) < MIN_CAPPED:
        return None
    # a deadline is the name's top: the values within two spreads below the longest (or below the
    # 5th longest: a few calls its timer let run late) give the candidate D
    for top in (hi[-1], hi[-MIN_CAPPED]):
        deadline = float(np.median(hi[hi >= top * (1 - 2 * SPREAD)]))
        lo, up = deadline * (1 - SPREAD), deadline * (1 + SPREAD)
        n_at = int(((d >= lo) & (d <= up)).sum())
        below = int(((d >= deadline * (1 - 5 * SPREAD)) & (d < lo)).sum())
        over = int((d > up).sum())
        # a deadline cuts calls of every length of work: answered calls lead up to it from the body
        # (a fixed slow path at one value, nothing between, is no deadline)
        lead = int(((d > FAR * np.median(d)) & (d < deadline * (1 - 5 * SPREAD))).sum())
        # the band at D is 2 spreads wide, the band below 4: densities compared
        if (n_at >= MIN_CAPPED and n_at >= SPIKE * below / 2 and over <= OUTLAST_SHARE * n_at
                and lead >= MIN_CAPPED):
            return deadline
    return None


def _by_name(frame: TraceFrame, spans: np.ndarray, values: np.ndarray) -> dict[int, float]:
    """Per name code of `spans` whose `values` a deadline caps: D (ns)."""
    out: dict[int, float] = {}
    codes = frame.name[spans]
    # small integer codes sort by radix (a few times faster on a million spans)
    order = np.argsort(codes.astype(np.int16 if len(frame.names) < 2**15 else np.int64), kind="stable")
    names = codes[order]
    cuts = np.r_[0, np.nonzero(np.diff(names))[0] + 1, len(order)]
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        deadline = _deadline(values[order[a:b]].astype(np.float64))
        if deadline is not None:
            out[int(names[a])] = deadline
    return out


def capped_names(frame: TraceFrame) -> dict[int, float]:
    """Per name code whose calls are read as deadline-capped: its deadline D (ns)."""
    return _by_name(frame, np.arange(len(frame)), frame.dur)


def _ancestors(frame: TraceFrame, spans: np.ndarray) -> np.ndarray:
    """Per span: an ancestor of one of `spans`."""
    out = np.zeros(len(frame), bool)
    up = frame.parent[spans]
    while len(up):
        up = up[up >= 0]
        up = up[~out[up]]
        out[up] = True
        up = frame.parent[up]
    return out


def _capped_spans(frame: TraceFrame, waits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The calls of the capped names and their D. A name whose calls at its D mostly hold an expired
    call of another capped name or an untraced call's expired wait (`waits`: the steps after them; the
    parent that waited, a spike only by inheritance) is not capped itself: the deadline is the
    innermost."""
    f = frame
    names = capped_names(f)
    while names:
        call = np.nonzero(np.isin(f.name, np.array(list(names), np.int64)))[0]
        deadline = np.array([names[c] for c in f.name[call].tolist()])
        expired = np.abs(f.dur[call] - deadline) <= SPREAD * deadline
        encloses = _ancestors(f, np.r_[call[expired], waits])
        inherited = [c for c in names if encloses[call[expired & (f.name[call] == c)]].mean() >= 0.5]
        if not inherited:
            return call, deadline
        names = {c: d for c, d in names.items() if c not in inherited}
    return np.zeros(0, np.int64), np.zeros(0)


def _waits(frame: TraceFrame, lay: Layout) -> tuple[np.ndarray, np.ndarray]:
    """The steps (spans laid out in a parent) of the names whose offsets from their parent's start a
    deadline caps, and their D."""
    f = frame
    kid = np.nonzero(lay.parent >= 0)[0]
    names = _by_name(f, kid, lay.rel_start[kid])
    if not names:
        return np.zeros(0, np.int64), np.zeros(0)
    step = kid[np.isin(f.name[kid], np.array(list(names), np.int64))]
    deadline = np.array([names[c] for c in f.name[step].tolist()])
    return step, deadline


def capped_calls(frame: TraceFrame, lay: Layout) -> Capped | None:
    """The run's deadline-capped calls and untraced calls' waits (None where there are none). A
    wait whose step's own gap is under half its offset was a traced sibling's (an expired call
    above), not an untraced call's."""
    f = frame
    step, d_step = _waits(f, lay)
    if len(step):
        at = np.abs(lay.rel_start[step] - d_step) <= SPREAD * d_step
        mine = ~at | (lay.gap[step] >= 0.5 * d_step)
        # a name whose waits at D are mostly a traced sibling's is no untraced call's
        keep = np.ones(len(step), bool)
        for code in np.unique(f.name[step]).tolist():
            named = f.name[step] == code
            if (mine[named & at]).mean() < 0.5:
                keep[named] = False
        step, d_step = step[keep], d_step[keep]
    waited = (np.abs(lay.rel_start[step] - d_step) <= SPREAD * d_step) & (lay.gap[step] >= 0.5 * d_step)
    call, d_call = _capped_spans(f, step[waited])
    if len(call) == 0 and len(step) == 0:
        return None
    span = np.r_[call, step]
    gap = np.r_[np.zeros(len(call), bool), np.ones(len(step), bool)]
    deadline = np.r_[d_call, d_step]
    parent_start = f.start[np.maximum(lay.parent[step], 0)]
    offset = lay.rel_start[step]
    expired = np.r_[np.abs(f.dur[call] - d_call) <= SPREAD * d_call, waited]
    value = np.r_[f.dur[call], lay.gap[step]].astype(np.float64)
    a = np.r_[f.start[call], parent_start]
    b = np.r_[f.start[call] + f.dur[call], parent_start + offset]
    return Capped(span, gap, deadline, expired, value, (a, b), _ancestors(f, span), _inside(f, call))


def _inside(frame: TraceFrame, calls: np.ndarray) -> np.ndarray:
    """Per span: a descendant of one of `calls`."""
    f = frame
    top = np.zeros(len(f), bool)
    top[calls] = True
    out = np.zeros(len(f), bool)
    for d in range(1, int(f.depth.max(initial=0)) + 1):
        sel = np.nonzero((f.depth == d) & (f.parent >= 0))[0]
        up = f.parent[sel]
        out[sel] = top[up] | out[up]
    return out


def _disturbed(frame: TraceFrame, capped: Capped, edit: Edit, skip: np.ndarray) -> np.ndarray:
    """Per entry: in flight while the lever removed a material stall on another instance (the lever's
    own cuts: time cut from a span's gap or own time, or a span set shorter that encloses no entry;
    not what its cuts moved)."""
    f = frame
    need = np.maximum(MIN_CUT_NS, CUT_SHARE * capped.deadline.min())
    shorter = np.where(np.isnan(edit.dur) | capped.encloses, 0.0, f.dur - np.nan_to_num(edit.dur))
    removed = np.maximum(edit.cut_before, 0) + np.maximum(edit.cut_after, 0) + np.maximum(shorter, 0)
    ev = np.nonzero((removed >= need) & ~skip & ~capped.inside)[0]
    if len(ev) == 0:
        return np.zeros(len(capped.span), bool)
    first = f.start[ev] - np.maximum(edit.cut_before[ev], 0).astype(np.int64)
    a, b = capped.window
    out = np.zeros(len(capped.span), bool)
    # a stall on another process: one on the call's own instance may be one the call caused (a call
    # that blocks its event loop holds the loop's other work; it is no victim of that wait)
    for inst in np.unique(f.instance[capped.span]).tolist():
        mine = f.instance[capped.span] == inst
        other = f.instance[ev] != inst
        if not other.any():
            continue
        order = np.argsort(first[other], kind="stable")
        starts = first[other][order]
        ends = np.maximum.accumulate((f.start[ev] + f.dur[ev])[other][order])
        idx = np.searchsorted(starts, b[mine], side="left") - 1
        out[mine] = (idx >= 0) & (ends[np.maximum(idx, 0)] > a[mine])
    return out


def _concentrated(expired: np.ndarray, moved: np.ndarray, calm: np.ndarray) -> bool:
    """The expiries sit under the removed stalls: the disturbed calls expired at least `CONCENTRATED`
    times as often as the undisturbed ones (their rate taken with one more expiry: a small calm
    set proves little). A deadline that cuts calls at the same rate in calm stretches is not the
    stall's."""
    rate = (expired & moved).sum() / max(moved.sum(), 1)
    calm_rate = ((expired & calm).sum() + 1) / (calm.sum() + 1)
    return bool((expired & moved).any() and rate >= CONCENTRATED * calm_rate)


def expiry_retimed(frame: TraceFrame, capped: Capped | None, edit: Edit, rng: np.random.Generator,
                   attempts: np.ndarray | None = None) -> Edit | None:
    """The edit with the capped calls and waits held by what the lever removed (`edit`'s own cuts)
    taking undisturbed ones' times; None where the lever removed no stall under an expired one."""
    if capped is None:
        return None
    f, c = frame, capped
    skip = np.zeros(len(f), bool)
    skip[c.span[~c.gap]] = True  # the capped calls themselves are no evidence of a stall elsewhere
    held = _disturbed(f, c, edit, skip)
    # a lever that set a call's time keeps it where it is shorter (each removed its own cause: with
    # both removed the call is no longer than either, as Edit.merged); calls cut at a deadline and
    # made again are attempts.py's
    free = np.ones(len(c.span), bool)
    if attempts is not None and len(attempts):
        free &= ~np.isin(c.span, attempts)
    out = None
    for code, gap in sorted({(int(n), bool(g)) for n, g in zip(f.name[c.span], c.gap, strict=True)}):
        mine = (f.name[c.span] == code) & (c.gap == gap) & free
        moved, calm = mine & held, mine & ~held
        if calm.sum() < MIN_CALM or not _concentrated(c.expired, moved, calm):
            continue
        if out is None:
            out = Edit(edit.dur.copy(), edit.cut_before.copy(), edit.cut_after.copy())
        pool = c.value[calm]
        draw = pool[rng.integers(0, len(pool), int(moved.sum()))]
        if gap:
            at = c.span[moved]
            out.cut_before[at] = np.maximum(out.cut_before[at], c.value[moved] - draw)
        else:
            out.dur[c.span[moved]] = np.fmin(out.dur[c.span[moved]], draw)
    return out
