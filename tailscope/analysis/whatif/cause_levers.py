"""Levers for the causes named by timeout_retry and cpu_throttling (large_payload's: payload_levers.py):
each built from the mechanism and the finding's evidence (the finding is only read: its span name,
service, timeout)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, SPAN_KINDS
from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, accepted_late, stall_edit
from tailscope.analysis.whatif.retime import Edit
from tailscope.analysis.whatif.retries import (
    abandoned_work_left,
    back_off_after_last,
    hedged_pairs,
    retried_calls,
)
from tailscope.analysis.whatif.stalls import PERIOD_NS

# ---- cpu_throttling: the stalls that end on the quota's period ------------------------------------


def _phases(stalls, period_ns: int) -> dict[int, float]:
    """Per instance with at least 3 stalls: the phase (ns modulo the period) at which they end."""
    inst, _, e = stalls
    out = {}
    for i in np.unique(inst).tolist():
        ends = e[inst == i]
        if len(ends) < 3:
            continue
        angle = 2 * np.pi * (ends % period_ns) / period_ns
        mean = float(np.arctan2(np.sin(angle).mean(), np.cos(angle).mean()) / (2 * np.pi) * period_ns)
        # the boundary itself: the earliest of the ends clustered about the mean (a throttled thread
        # resumes on it; the mean sits later, pulled by stalls that end after it)
        off = (ends - mean + period_ns / 2) % period_ns - period_ns / 2
        near = off[np.abs(off) <= PHASE_SPREAD_NS]
        out[i] = mean + (float(np.quantile(near, 0.05)) if len(near) else 0.0) - PHASE_MARGIN_NS
    return out


PHASE_SPREAD_NS = 5_000_000
PHASE_MARGIN_NS = 50_000
ACCEPTED_AT_BOUNDARY_NS = 500_000


def _accepted_at_boundary(x: Inputs, phases: dict[int, float], period_ns: int, edit) -> None:
    """Calls to a throttled instance whose span starts just after a period boundary, later than the
    call's usual gap, waited for the quota (the server accepts nothing while stopped; a sidecar proxy
    forwards nothing: its outbound span opens late under the app's call): their gap is cut to the
    median gap of the calls that did not start on a boundary. A call from a throttled instance whose
    callee's span starts just after the caller's boundary was sent late (a proxy that stopped before
    forwarding it): the same."""
    f = x.frame
    kid = np.nonzero(f.parent >= 0)[0]
    par = f.parent[kid]
    kid, par = kid[f.instance[par] != f.instance[kid]], par[f.instance[par] != f.instance[kid]]
    keep = np.isin(f.instance[kid], list(phases)) | np.isin(f.instance[par], list(phases))
    kid, par = kid[keep], par[keep]
    if len(kid) == 0:
        return
    at = np.zeros(len(kid), bool)
    for side in (kid, par):
        has = np.isin(f.instance[side], list(phases))
        phase = np.array([phases.get(i, 0.0) for i in f.instance[side].tolist()])
        at |= has & ((f.start[kid] - phase - PHASE_MARGIN_NS) % period_ns <= ACCEPTED_AT_BOUNDARY_NS)
    gap = (f.start[kid] - f.start[par]).astype(np.float64)
    for code in np.unique(f.name[kid]).tolist():
        same = f.name[kid] == code
        if not (same & ~at).any():
            continue
        typical = float(np.median(gap[same & ~at]))
        late = np.nonzero(same & at & (gap > typical))[0]
        edit.cut_before[kid[late]] = np.maximum(edit.cut_before[kid[late]], gap[late] - typical)


def _replied_at_boundary(x: Inputs, phases: dict[int, float], period_ns: int, edit) -> None:
    """A throttled instance's span with children that ends just after a period boundary, its time
    after its last child longer than the same span's usual one, waited for the quota to reply (a
    proxy's inbound span holds the reply until the next period): that time is cut to the median of
    the same spans that did not end on a boundary."""
    f, lay = x.frame, x.lay
    for i, phase in phases.items():
        sel = np.nonzero((f.instance == i) & lay.has_children)[0]
        at = (f.end[sel] - phase - PHASE_MARGIN_NS) % period_ns <= ACCEPTED_AT_BOUNDARY_NS
        trailing = lay.trailing[sel].astype(np.float64)
        for code in np.unique(f.name[sel]).tolist():
            same = f.name[sel] == code
            if not (same & ~at).any():
                continue
            typical = float(np.median(trailing[same & ~at]))
            late = np.nonzero(same & at & (trailing > typical))[0]
            edit.cut_after[sel[late]] = np.maximum(edit.cut_after[sel[late]], trailing[late] - typical)


OUTBOUND = (KIND_CLIENT, SPAN_KINDS.index("Producer"))  # calls out (a request, a message sent)


def _crossing_leaves(x: Inputs, phases: dict[int, float], period_ns: int) -> np.ndarray:
    """Leaves of requests on a throttled instance that run across one of its period boundaries (a
    throttled thread resumes only there: a span stretched by the quota crosses one); and the calls of
    the app beside a throttled proxy (its node mate: network_levers.node_mates) that leave no span in
    the proxy (a database's protocol proxied as bytes): they cross the proxy's boundaries alike."""
    from tailscope.analysis.whatif.network_levers import node_mates

    f = x.frame
    out = np.zeros(len(f), bool)
    leaf = ~x.lay.has_children
    for i, phase in phases.items():
        sel = np.nonzero((f.instance == i) & leaf)[0]
        mates = [m for m in node_mates(f, [i]) if m not in phases]
        sel = np.r_[sel, np.nonzero(np.isin(f.instance, mates) & leaf & np.isin(f.kind, OUTBOUND))[0]]
        before = np.floor((f.start[sel] - phase) / period_ns)
        after = np.floor((f.end[sel] - phase) / period_ns)
        out[sel[after > before]] = True
    return out


MIN_UNCROSSED = 0.1  # a span's chance to cross no period boundary, floored (its weight at most 10)


def no_throttling(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    stalls = x.throttle_stalls
    if stalls is None or len(stalls[0]) == 0:
        return None
    f = x.frame
    named = (finding.get("evidence") or {}).get("stats", {}).get("instances") or []
    codes = {f.instances.index(n) for n in named if n in f.instances}
    # a CPU limit is set per deployment: every instance of a named instance's service with stalls on
    # a period of its own
    services = {int(f.service[np.argmax(f.instance == c)]) for c in codes if (f.instance == c).any()}
    codes |= {int(i) for i in np.unique(f.instance[np.isin(f.service, list(services))])}
    phases = {i: p for i, p in _phases(stalls, PERIOD_NS).items() if not codes or i in codes}
    edit = stall_edit(x, stalls)
    crossing = _crossing_leaves(x, phases, PERIOD_NS)
    _accepted_at_boundary(x, phases, PERIOD_NS, edit)
    _replied_at_boundary(x, phases, PERIOD_NS, edit)
    rng = x.rng(22)
    leaf = ~x.lay.has_children
    running = max(PERIOD_NS - float(np.median(stalls[2] - stalls[1])), 0.1 * PERIOD_NS)
    # drawn from the instances not throttled (on a throttled one, the spans that did not cross a
    # boundary are the short ones: a span crosses with a chance of its length over the period)
    free = ~np.isin(f.instance, list(phases))
    for code in np.unique(f.name[crossing]).tolist():
        pool = f.dur[leaf & free & (f.name == code)]
        weight = None
        if len(pool) < 20:
            # every instance throttled: the spans that crossed no boundary, weighted so that they
            # stand for those that crossed one: a span of length d started at random in the part of
            # the period the quota lets run (W) crosses with chance d/W and crosses none with 1 - d/W,
            # so the crossed ones are the uncrossed ones weighted by (d/W) / (1 - d/W)
            pool = f.dur[leaf & ~crossing & (f.name == code)]
            share = np.minimum(pool / running, 1.0)
            weight = np.maximum(share, 1e-3) / np.maximum(1.0 - share, MIN_UNCROSSED)
        spans = np.nonzero(crossing & (f.name == code))[0]
        if len(pool):
            p = None if weight is None else weight / weight.sum()
            edit.dur[spans] = np.minimum(pool[rng.choice(len(pool), len(spans), p=p)], f.dur[spans])
            edit.cut_after[spans] = 0.0
    total = float((stalls[2] - stalls[1]).sum()) / 1e6
    return Lever(
        "no_throttling",
        "No CPU throttling (limit raised to the peak use)",
        SOFTWARE,
        "on the throttled instances, the stalls that end on the CPU quota's 100 ms period boundary "
        "leave every span in flight (and a caller waiting for it), each span that ran across a period "
        "boundary takes the time of the same span on an instance not throttled (drawn from the run), "
        "a call accepted on a boundary its usual gap; the queue before the model is replayed",
        edit,
        pattern="cpu_throttling",
        requeue=True,
        params={"stall_ms": round(total, 1), "instances": len(phases),
                "spans_redrawn": int(crossing.sum())},
        arrival_shift=accepted_late(x, stalls),
    )


# ---- timeout_retry: the attempts cut by a deadline and made again ---------------------------------


def _answered_at_once(x: Inputs, finding: dict[str, Any], hedge_ns: float | None) -> Edit | None:
    """Each retried call answered by its last attempt started when the first was (`hedge_ns` None),
    or by a second copy sent `hedge_ns` after the first attempt (the earlier answer wins)."""
    f = x.frame
    s, group, pos = retried_calls(x, finding)
    rep = group >= 0
    if not rep.any():
        return None
    edit = Edit.none(len(f))
    last_pos = np.zeros(int(group.max()) + 1, np.int64)
    np.maximum.at(last_pos, group[rep], pos[rep])
    is_first = rep & (pos == 0)
    is_last = rep & (pos == last_pos[np.maximum(group, 0)])
    answer = np.zeros(int(group.max()) + 1)
    answer[group[is_last]] = f.dur[s[is_last]]
    head = s[is_first]
    later = s[rep & ~is_first]
    edit.dur[later] = 0.0  # no longer made: no time, and no back-off before it
    edit.cut_before[later] = x.lay.gap[later]
    took = answer[group[is_first]]
    edit = back_off_after_last(x, edit, s, group, pos)  # no give-up back-off once answered at once
    if hedge_ns is None:
        edit.dur[head] = took
        return abandoned_work_left(x, edit, s)
    edit.dur[head] = np.minimum(f.dur[head], hedge_ns + took)
    single = s[~rep]
    slow = single[f.dur[single] > hedge_ns]
    answered = f.dur[s[is_last | ~rep]]
    timeout = (finding.get("evidence") or {}).get("stats", {}).get("timeout_ms")
    if timeout:  # a last attempt cut at the deadline did not answer: no copy takes its time
        answered = answered[answered < 0.97 * timeout * 1e6]
    if len(slow) and len(answered):  # a call that was not retried gets its copy too
        copy = answered[x.rng(21).integers(0, len(answered), len(slow))].astype(np.float64)
        edit.dur[slow] = np.minimum(f.dur[slow], hedge_ns + copy)
    return abandoned_work_left(x, edit, s)


def no_timeouts(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    edit = _answered_at_once(x, finding, None)
    if edit is None:
        return None
    name = finding.get("span_name")
    return Lever(
        f"no_timeouts:{name}",
        f"'{name}' answered at the first attempt (no timed-out attempts)",
        SOFTWARE,
        "each call made again after a deadline is answered by the attempt that succeeded, started when "
        "the first attempt was: the timed-out attempts and the back-off before each retry leave the "
        "critical path (the callee's hang fixed)",
        edit,
        pattern="timeout_retry",
        span_name=name,
        requeue=True,
        params={"retried_calls": int(np.count_nonzero(~np.isnan(edit.dur) & (edit.dur > 0)))},
    )


AT_DEADLINE = 0.97  # an attempt within 3 % of the longest was cut at the deadline
DEADLINE_SHARE = 0.1  # ... where at least this share of the attempts were: the deadline shows


def deadline_ms(d: np.ndarray) -> float | None:
    """The attempts' deadline where the finding does not give it: the ceiling the cut attempts sit at
    (at least DEADLINE_SHARE of them within 3 % of the longest); None where they sit at none."""
    if len(d) < 20 or d.max() <= 0:
        return None
    top = d >= AT_DEADLINE * d.max()
    return float(np.median(d[top])) / 1e6 if top.mean() >= DEADLINE_SHARE else None


def callee_p50(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """The callee fixed: no attempt times out, and every call takes the median of the calls that
    answered (a call cut at the timeout did not answer, nor a hedged call's first attempt cancelled
    when its copy answered). Where no call shows its attempts (a proxy retries inside it: the caller's
    one span covers every try and the back-off), every call at the median. A hedge's copies are not
    sent where that median is under the hedge's delay."""
    s, group, pos = retried_calls(x, finding)
    if len(s) == 0:
        return None
    f = x.frame
    edit = _answered_at_once(x, finding, None) or Edit.none(len(f))
    d = f.dur[s].astype(np.float64)
    timeout = (finding.get("evidence") or {}).get("stats", {}).get("timeout_ms") or deadline_ms(d)
    # a hedged call's first attempt ends when its copy answers (cancelled): no answer of its own
    first, copy = hedged_pairs(x, finding, s)
    answered = d[~np.isin(s, first)]
    answered = answered[answered < 0.97 * timeout * 1e6] if timeout else answered
    if len(answered) == 0:
        return None
    p50 = float(np.median(answered))
    calls = s[((group < 0) | (pos == 0)) & ~np.isin(s, copy)]  # singles, each retried call's first attempt
    edit.dur[calls] = p50
    if len(copy) and p50 < float(np.median(f.start[copy] - f.start[first])):
        edit.dur[copy] = 0.0  # answered before the hedge's delay: no copy sent
        edit.cut_before[copy] = x.lay.gap[copy]
    edit = abandoned_work_left(x, edit, calls)
    name = finding.get("span_name")
    return Lever(
        f"callee_p50:{name}",
        f"'{name}' at its p50 ({p50 / 1e6:.1f} ms), no timeouts (the callee's slowness fixed)",
        SOFTWARE,
        "every call takes the median of the calls that answered, and a call made again after a "
        "deadline is answered at its first attempt: the timed-out attempts and the back-off leave the "
        "critical path",
        edit,
        pattern="timeout_retry",
        span_name=name,
        requeue=True,
        params={"p50_ms": round(p50 / 1e6, 3)},
    )


def hedged_callee_fixed(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A slow dependency whose calls a hedge doubles: fixed, it answers at its median before the
    hedge's delay and no copy is sent (callee_p50; dependency_p50 leaves the copies in)."""
    if len(hedged_pairs(x, finding)[0]) == 0:
        return None
    return callee_p50(x, finding)


def hedged(x: Inputs, finding: dict[str, Any], hedge_ms: float | None = None) -> Lever | None:
    stats = (finding.get("evidence") or {}).get("stats", {})
    s = retried_calls(x, finding)[0]
    if len(s) == 0:
        return None
    if hedge_ms is None:  # the call's own p95, as the finding's advice says
        d = x.frame.dur[s].astype(np.float64)
        timeout = stats.get("timeout_ms") or deadline_ms(d)
        under = d[d < 0.97 * timeout * 1e6] if timeout else d
        hedge_ms = float(np.quantile(under if len(under) else d, 0.95)) / 1e6
    edit = _answered_at_once(x, finding, hedge_ms * 1e6)
    if edit is None:
        return None
    name = finding.get("span_name")
    return Lever(
        f"hedged:{name}",
        f"'{name}' hedged: a second copy after {hedge_ms:.1f} ms",
        SOFTWARE,
        "a second copy of the call is sent when the first has taken the hedge delay (default: the "
        "answered calls' p95) and the first answer is taken; the copy takes the retry's own time where "
        "the call was retried, else a time drawn from the calls that answered; the extra load a copy "
        "puts on the callee is not modelled",
        edit,
        pattern="timeout_retry",
        span_name=name,
        requeue=True,
        params={"hedge_ms": round(hedge_ms, 3)},
    )
