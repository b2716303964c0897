"""Fixed timer quanta: a call that waits out a timer of the resolver or the kernel.

A lost DNS query is sent again only after the resolver's timeout (glibc `timeout:5`: 5 s); a SYN the
peer dropped is sent again after the initial retransmission timeout (1 s, then 2 s, 4 s: a connect
takes 1, 3 or 7 s more); a data segment after the minimum RTO (200 ms). Such a call takes its usual
time plus a whole number of the timer's length, nothing in between: its spans' durations form a
second cluster exactly one quantum (or several) above their usual body, with nothing half a quantum
above it. The fix (resolver options, conntrack, a listen backlog) removes the quantum from the calls
that carry it and nothing else: each such span takes its duration less the whole quanta.

A span waiting out a timer may hold a slot of a bounded pool meanwhile (getaddrinfo runs on a blocking
thread pool); other work then waits for a slot. The pool is found from the run: leaves that waited
(a gap before them) start as another leaf on the same instance ends, at most as many at once as its
slots; the pool's jobs are replayed first come first served through those slots with the quanta
removed, and each job's wait becomes the replay's (never longer than measured): a model, stated as
such."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.replay import fifo_starts
from tailscope.analysis.whatif.retime import Edit

MS = 1_000_000
# the timers' lengths, longest first (a longer one can be a multiple of a shorter: 5 s of 1 s)
TIMERS_NS = (5_000 * MS, 1_000 * MS, 200 * MS)
MIN_CARRIERS = 3  # spans carrying a quantum a name needs
PEAK_RATIO = 3.0  # carriers at least this many times the spans half a quantum off (plus one)
MAX_TOL = 0.2  # a carrier is within this share of the quantum of base + n quanta, at most
TAKEN_NS = 200_000  # a job that waited starts as another ends (within the hand-off)
WAIT_NS = 1 * MS  # a gap before a leaf over this is a wait worth a look
POOL_SHARE = 0.5  # of a name's waited leaves, this share start as a pool job ends
MIN_WAITED = 20  # waited leaves a name needs to be a pool's job
RELEASE_SHARE = 0.2  # a name whose ends start at least this share of a job name's waited leaves


def quantum_cuts(dur: np.ndarray) -> np.ndarray:
    """For one span name's durations (ns): the whole timer quanta each carries (ns; 0 for most). A
    timer counts where at least MIN_CARRIERS spans sit one or more quanta above the name's median
    (within the body's spread) and PEAK_RATIO times as many as sit half a quantum off."""
    rest = dur.astype(np.float64)
    cut = np.zeros(len(rest))
    if len(rest) < 20:
        return cut
    for q in TIMERS_NS:
        base = float(np.median(rest))
        body = rest[rest < base + q / 2]
        lo, hi = np.quantile(body, [0.01, 0.99])
        tol = min(max(hi - base, base - lo, 0.01 * q), MAX_TOL * q)
        n = np.rint((rest - base) / q)
        carry = (n >= 1) & (np.abs(rest - base - n * q) <= tol)
        half = np.rint((rest - base - q / 2) / q)
        off = (half >= 0) & (np.abs(rest - base - q / 2 - half * q) <= tol)
        if carry.sum() < MIN_CARRIERS or carry.sum() < PEAK_RATIO * (off.sum() + 1):
            continue
        cut[carry] += n[carry] * q
        rest[carry] -= n[carry] * q
    return cut


def _scope(x: Inputs, finding: dict[str, Any]) -> np.ndarray:
    """The leaves under (or at) the finding's spans of its service: where a timer's wait sits."""
    f = x.frame
    spans = x.spans_named(finding.get("span_name"), in_requests=False)
    service = (finding.get("evidence") or {}).get("stats", {}).get("service")
    if service in f.services and len(spans):
        own = spans[f.service[spans] == f.services.index(service)]
        spans = own if len(own) else spans
    inside = np.zeros(len(f), bool)
    inside[spans] = True
    for level in reversed(x.lay.levels):  # top-down: a span is inside where its parent is
        inside[level.kids] |= inside[x.lay.parent[level.kids]]
    return np.nonzero(inside & ~x.lay.has_children)[0]


def pool_jobs(x: Inputs) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
    """A bounded pool's jobs (leaf rows), whether each waited for a slot, and the slots per instance:
    the leaf names whose waited leaves start, at least POOL_SHARE of the time, as a leaf on their
    instance ends, with those leaves' names; empty where the run shows no such pool."""
    f, lay = x.frame, x.lay
    leaves = np.nonzero(~lay.has_children & (lay.parent >= 0))[0]
    end = (f.start + f.dur)[leaves]
    waited = leaves[lay.gap[leaves] > WAIT_NS]
    if len(waited) < MIN_WAITED:
        return np.zeros(0, np.int64), np.zeros(0, bool), {}
    # per waited leaf: a leaf on its instance that ended within TAKEN_NS before it started
    key = f.instance[leaves].astype(np.int64) * (1 << 42) + end
    order = np.argsort(key, kind="stable")
    skey = key[order]
    want = f.instance[waited].astype(np.int64) * (1 << 42) + f.start[waited]
    pos = np.searchsorted(skey, want, side="right") - 1
    ok = pos >= 0
    rel = np.where(ok, order[np.maximum(pos, 0)], 0)
    ok &= (want - skey[np.maximum(pos, 0)] <= TAKEN_NS) & (leaves[rel] != waited)
    names: set[int] = set()
    for code in np.unique(f.name[waited]).tolist():
        mine = f.name[waited] == code
        if mine.sum() >= MIN_WAITED and ok[mine].mean() >= POOL_SHARE:
            names.add(code)
            by, count = np.unique(f.name[leaves[rel[mine & ok]]], return_counts=True)
            names.update(by[count >= RELEASE_SHARE * count.sum()].tolist())
    if not names:
        return np.zeros(0, np.int64), np.zeros(0, bool), {}
    jobs = leaves[np.isin(f.name[leaves], list(names))]
    slots = {}
    for inst in np.unique(f.instance[jobs]).tolist():
        on = jobs[f.instance[jobs] == inst]
        t = np.r_[f.start[on], f.start[on] + f.dur[on]]
        step = np.r_[np.ones(len(on)), -np.ones(len(on))]
        o = np.lexsort((step, t))
        slots[inst] = int(np.cumsum(step[o]).max(initial=1))
    gap_ok = np.isin(jobs, waited[ok])
    return jobs, gap_ok, slots


def replay_pool(arrive: np.ndarray, service: np.ndarray, slots: int) -> np.ndarray:
    """First come first served through `slots` servers: each job's wait (ns)."""
    return fifo_starts(arrive, service, max(slots, 1)) - arrive


def _overlaps(a: np.ndarray, b: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each interval [a, b] meets one of the intervals [start, end]."""
    if not len(start):
        return np.zeros(len(a), bool)
    order = np.argsort(start, kind="stable")
    s, reach = start[order], np.maximum.accumulate(end[order])
    pos = np.searchsorted(s, b, side="right") - 1
    return (pos >= 0) & (reach[np.maximum(pos, 0)] >= a)


def backlog_behind(a: np.ndarray, b: np.ndarray, waited: np.ndarray, start: np.ndarray, end: np.ndarray
                    ) -> np.ndarray:
    """Whether each waited job [a, b] is part of a backlog (waits overlapping one another) that met a
    carrier's interval: the jobs queued after it ended still drain the queue it built."""
    out = np.zeros(len(a), bool)
    rows = np.nonzero(waited)[0]
    if not len(rows):
        return out
    rows = rows[np.argsort(a[rows], kind="stable")]
    reach = np.maximum.accumulate(b[rows])
    new = np.r_[True, a[rows][1:] > reach[:-1]]  # a backlog starts where no earlier wait reaches
    group = np.cumsum(new) - 1
    lo = a[rows][new]
    hi = np.maximum.reduceat(b[rows], np.nonzero(new)[0])
    hit = _overlaps(lo, hi, start, end)
    out[rows] = hit[group]
    return out


def _pool_cuts(x: Inputs, edit: Edit, carriers: np.ndarray) -> int:
    """The pool's jobs replayed with the edited durations; each job that waited while a carrier of a
    quantum ran on its instance (a job itself, or a call holding a slot the trace does not show:
    getaddrinfo inside a CLIENT span) has its gap cut to the replay's wait. Returns how many waits
    shrank."""
    f, lay = x.frame, x.lay
    jobs, waited, slots = pool_jobs(x)
    if not len(jobs):
        return 0
    wait = np.where(waited, lay.gap[jobs], 0).astype(np.float64)
    arrive = f.start[jobs] - wait
    service = np.maximum(f.dur[jobs] - edit.cut_after[jobs], 0.0)
    less = np.zeros(len(jobs))
    for _ in range(2):  # again with each job arriving earlier by what its request's earlier jobs lost
        moved = arrive - _earlier_cuts(f.trace[jobs], f.start[jobs], less + edit.cut_after[jobs])
        for inst, c in slots.items():
            on = f.instance[jobs] == inst
            held = carriers[f.instance[carriers] == inst]
            behind = backlog_behind(arrive[on], f.start[jobs[on]], waited[on], f.start[held],
                                     f.start[held] + f.dur[held])
            if behind.any():
                new = replay_pool(moved[on], service[on], c)
                less[on] = np.where(behind, np.maximum(wait[on] - new, 0.0), 0.0)
    edit.cut_before[jobs] += less
    return int((less > 0).sum())


def _earlier_cuts(trace: np.ndarray, start: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """Per job: the time cut from the jobs of its request that started before it (a chain's later
    steps start that much earlier)."""
    order = np.lexsort((start, trace))
    total = np.cumsum(cut[order])
    first = np.r_[True, trace[order][1:] != trace[order][:-1]]
    offset = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    before = total - cut[order] - np.r_[0.0, total][offset]
    out = np.empty(len(cut))
    out[order] = before
    return out


DELAYS_NS = (200 * MS, 40 * MS)  # the minimum RTO; the delayed ACK (Linux's minimum timer)
SHIFT_TOL = 0.25  # a reused connection's exchange this share of a delay off the new ones' plus it
MIN_CALLS = 20  # calls of each kind (a new connection, a reused one) to compare


def reused_delay(x: Inputs, calls: np.ndarray) -> np.ndarray:
    """Per call: a timer's delay on a reused connection (ns; 0 elsewhere). A call that opens its
    connection (a child whose name says connect, a handshake) pays the handshakes, then its exchange;
    one on a reused connection is the exchange alone and should take no longer than that. Where the
    reused calls' median is one timer's length (40 ms: a small write held by Nagle until the peer's
    delayed ACK; 200 ms: the minimum RTO) above the new calls' exchange after their connect, each
    reused call carries it: the fix (TCP_NODELAY, a write of its own) removes it from each."""
    from tailscope.analysis.whatif.network_levers import CONNECT_WORDS

    f, lay = x.frame, x.lay
    out = np.zeros(len(calls))
    connect = np.array([any(w in n.lower() for w in CONNECT_WORDS) for n in f.names], bool)
    kids = np.nonzero(lay.parent >= 0)[0]
    opened = np.zeros(len(f), bool)
    opened[lay.parent[kids[connect[f.name[kids]]]]] = True
    new, reused = opened[calls], ~lay.has_children[calls]
    if new.sum() < MIN_CALLS or reused.sum() < MIN_CALLS:
        return out
    exchange = lay.trailing[calls[new]].astype(np.float64)
    shift = float(np.median(f.dur[calls[reused]])) - float(np.median(exchange))
    for q in DELAYS_NS:
        if abs(shift - q) <= SHIFT_TOL * q:
            floor = float(np.quantile(exchange, 0.01))
            out[reused] = np.minimum(q, np.maximum(f.dur[calls[reused]] - floor, 0.0))
            break
    return out


def timer_quanta(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """The whole timer quanta removed from the finding's calls that carry them (and the waits of a
    bounded pool's jobs queued behind the spans that held its slots meanwhile)."""
    f = x.frame
    leaves = _scope(x, finding)
    edit = Edit.none(len(f))
    carriers = []
    for code in np.unique(f.name[leaves]).tolist():
        for svc in np.unique(f.service[leaves[f.name[leaves] == code]]).tolist():
            rows = leaves[(f.name[leaves] == code) & (f.service[leaves] == svc)]
            cut = quantum_cuts(f.dur[rows])
            edit.cut_after[rows] += cut
            carriers.append(rows[cut > 0])
    calls = x.spans_named(finding.get("span_name"), in_requests=False)
    calls = calls[f.kind[calls] == KIND_CLIENT]
    delay = reused_delay(x, calls)
    edit.cut_after[calls] += np.minimum(delay, np.maximum(f.dur[calls] - edit.cut_after[calls], 0.0))
    carriers.append(calls[delay > 0])
    held = np.concatenate(carriers)
    if not len(held):
        return None
    queued = _pool_cuts(x, edit, held)
    name = finding.get("span_name")
    return Lever(
        f"network_timers:{name}",
        f"Timer waits removed from '{name}' ({len(held)} calls waited out a resolver or TCP timer)",
        SOFTWARE,
        "the calls that took their usual time plus whole quanta of a resolver's or the kernel's timer "
        "(5 s, 1 s, 200 ms) take it less the quanta, calls on a reused connection one delay (40 ms "
        "delayed ACK, 200 ms RTO) longer than a new connection's exchange take it less; a bounded "
        "pool's jobs queued behind them are replayed through its slots (a model)",
        edit,
        pattern=finding.get("pattern"),
        span_name=name,
        params={"carriers": len(held), "pool_waits_shrunk": queued},
    )
