"""Waits inside the handler that a burst of arrivals makes: part of the queueing finding, not a lock.

Mechanism. When arrivals outrun what a process can run (a burst on single-threaded event loops, a
small worker pool), calls wait for the process before their handler starts (the accept queue,
accept_queue.py, or the request root's wait, queueing.py) and, inside it, for whatever the crowd
fills: on an event loop every await resumes late, and a connection pool whose connections are held
for the whole request runs dry. Those waits grow with the requests in the span, so lock_contention
reads a lock. A lock that serialises the work contends at whatever rate the load has; waits that rise
and fall with the arrival rate, on a process whose calls also queue before the handler while more of
them come (the rate at those waits >= 1.3x the mean), are the burst's: the cause is more calls than
the process can run, whatever they then wait for inside. (held_slots.py is the other direction: a
queue at an ordinary rate whose slots a lock or the misses held is theirs.)

Statistic. Arrivals over ~100 time bins (queueing.time_bins): their index of dispersion (about 1 for a
Poisson load) and, per bin, the mean excess of a request's time in the lock's span (its children
included) over its median; the correlation of the two at lags 0..10 bins (the crowd builds while
arrivals exceed capacity and drains after), as queueing.py does for the wait before the work. The lock
finding is marked part of the queueing finding and capped below it; the queueing finding adds the
span's tail-excess share to its own and is weighed on the sum, its strength the smaller of its own
test and this one. Where the work no lock guards waits with the bursts as well (a span name most
requests run, neither the root nor around or inside the lock span, whose time follows the arrivals and
carries >= 5 % of the tail excess:
every await resumes late on a starved thread pool or a saturated event loop), the lock finding is
held at 0.45: what runs short is what all the work needs, not a lock.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.held_slots import ORDINARY_RATE
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.queueing import MAX_LAG, dispersion, time_bins
from tailscope.analysis.diagnosis.stats import excess_share, lagged_correlation, logistic, ms
from tailscope.analysis.diagnosis.transaction_waits import MECHANISM as TRANSACTION_WAITS
from tailscope.analysis.diagnosis.where import main_service

LOCKS = ("lock_contention",)
MIN_CONFIDENCE = 0.3
EVERYWHERE = 1  # unrelated span names whose waits follow the burst too: the process's threads, not a lock
MATERIAL_WAIT = 0.05  # ... and carry this share of the tail excess or more
HELD = 0.45
ACCEPT = "arrival_rate_at_large_waits"  # an accept-queue finding's (accept_queue.py)


def follows_arrivals(
    ctx: Context, code: int, arrivals: np.ndarray, b: np.ndarray
) -> tuple[float, int, float]:
    """(correlation of the arrivals with the mean excess time per request in span name `code` at the
    best lag, that lag in bins, the name's tail-excess share with its children)."""
    f = ctx.frame
    per = ctx.per_request((f.name == code) & (f.request >= 0), f.dur.astype(np.float64))
    has = per > 0
    if has.sum() < 50:
        return 0.0, 0, 0.0
    excess = np.where(has, per - float(np.median(per[has])), 0.0)
    count = np.bincount(b[has], minlength=len(arrivals))
    mean = np.bincount(b, weights=excess, minlength=len(arrivals)) / np.maximum(count, 1)
    lag, r, _ = lagged_correlation(arrivals[1:-1], mean[1:-1], MAX_LAG)
    return r, lag, excess_share(per, ctx.split)


def _unrelated_waits(ctx: Context, marked: set[int], service: str | None, arrivals: np.ndarray,
                     b: np.ndarray) -> list[str]:
    """Span names of the service that most requests run, neither the request root nor inside or around
    the lock spans, whose time per request follows the arrivals too (r >= 0.5) and carries >= 5 % of the
    tail excess: where every await resumes late (a thread pool starved, a saturated event loop), waits
    show in work no lock guards."""
    f = ctx.frame
    roots = set(np.unique(f.name[f.requests.root]).tolist())
    present = np.bincount(f.name[f.request >= 0], minlength=len(f.names)) >= 0.5 * ctx.n_requests
    out = []
    for code in np.nonzero(present)[0].tolist():
        if code in marked or code in roots or any(_inside(f, code, m) or _inside(f, m, code) for m in marked):
            continue
        spans = f.name == code
        if service is not None and main_service(f, spans) != service:
            continue
        r, _, share = follows_arrivals(ctx, code, arrivals, b)
        if r >= 0.5 and share >= MATERIAL_WAIT:
            out.append(f.names[code])
    return out


def _inside(f, outer: int, inner: int) -> bool:
    """Whether most spans of name `inner` sit inside one of name `outer` (parent or grandparent)."""
    spans = np.nonzero(f.name == inner)[0]
    up = f.parent[spans]
    hit = (up >= 0) & (f.name[np.maximum(up, 0)] == outer)
    up2 = np.where(up >= 0, f.parent[np.maximum(up, 0)], -1)
    hit |= (up2 >= 0) & (f.name[np.maximum(up2, 0)] == outer)
    return bool(len(spans) and hit.mean() >= 0.5)


def _queue(ctx: Context, findings: list[Finding]) -> tuple[Finding, float] | None:
    """The queueing finding to weigh the waits on, with the strength of its own test: the accept
    queue's (it names the server that queues) where its calls waited while more came, else the wait
    before the work's (queueing.py)."""
    for fd in sorted(findings, key=lambda x: ACCEPT not in x.evidence.get("stats", {})):
        stats = fd.evidence.get("stats", {})
        if fd.pattern != "queueing" or stats.get("part_of"):
            continue
        if ACCEPT in stats:
            if stats[ACCEPT] < ORDINARY_RATE:
                continue  # slots held longer at an ordinary rate: not a burst (held_slots.py)
            strength = ctx.notes.get("accept_queue_strength", 0.0)
        else:
            strength = ctx.notes.get("queueing_strength", 0.0)
        if strength >= 0.5:
            return fd, strength
    return None


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Mark lock_contention findings whose waits follow a burst of arrivals part of the queueing
    finding, and weigh that finding on the waits inside the handler too."""
    f = ctx.frame
    # (waits a transaction of another request releases, on any instance, are that transaction's lock,
    # not the queueing process's capacity run dry: transaction_waits.py)
    locks = [
        fd for fd in findings
        if fd.pattern in LOCKS and fd.span_name in f.names and not fd.evidence.get("stats", {}).get("part_of")
        and fd.evidence.get("stats", {}).get("mechanism") != TRANSACTION_WAITS
    ]
    picked = _queue(ctx, findings) if locks and ctx.n_requests >= 100 else None
    if picked is None:
        return findings
    queue, strength = picked
    b, bins, width = time_bins(f.requests.arrival)
    arrivals = np.bincount(b, minlength=bins).astype(np.float64)
    spread = dispersion(arrivals)
    bursty = logistic(spread, 2.5, 0.5)
    service = queue.evidence["stats"].get("service")
    inside = []
    for lock in locks:
        if lock.confidence < MIN_CONFIDENCE:
            continue
        code = f.names.index(lock.span_name)
        spans = f.name == code
        if service is not None and main_service(f, spans) != service:
            continue  # a lock in another service than the one that queues
        r, lag, share = follows_arrivals(ctx, code, arrivals, b)
        burst = logistic(r, 0.5, 0.08) * bursty
        if burst >= 0.5:
            inside.append((lock, burst, r, lag, share))
    if not inside:
        return findings
    marked = {f.names.index(lock.span_name) for lock, *_ in inside}
    taken = [lock for lock, *_ in inside]
    for lock in locks:  # the same waits seen on a span inside or around one of them (merged later)
        code = f.names.index(lock.span_name)
        nested = any(_inside(f, code, m) or _inside(f, m, code) for m in marked)
        if nested and code not in marked and lock not in taken:
            r, lag, _ = follows_arrivals(ctx, code, arrivals, b)
            inside.append((lock, 0.0, r, lag, 0.0))
    stats = queue.evidence["stats"]
    _, burst, r, lag, share = max(inside, key=lambda x: x[4])
    names = ", ".join(dict.fromkeys(f"'{lock.span_name}'" for lock, *_ in inside))
    own = float(stats.get("tail_excess_share") or 0.0)
    total = min(1.0, own + share)
    stats.update(
        tail_excess_share=round(total, 3),
        wait_before_work_share=round(own, 3),
        waits_inside_handler=[lock.span_name for lock, *_ in inside],
        waits_inside_handler_share=round(share, 3),
        waits_inside_follow_arrivals=round(r, 3),
        arrival_dispersion=round(spread, 2),
    )
    queue.confidence = max(queue.confidence, min(strength, burst) * logistic(total, 0.3, 0.08))
    queue.evidence["summary"] += (
        f" Inside the handler, the time in {names} ({share:.0%} of the tail excess) rises and falls with "
        f"the arrivals too (r={r:.2f} at a lag of {ms(lag * width):.0f} ms; arrivals' dispersion "
        f"{spread:.1f}): the burst fills what the requests share there (a connection pool, the event "
        f"loop), so those waits are this queue's, {total:.0%} of the tail excess in all."
    )
    elsewhere = _unrelated_waits(ctx, marked, service, arrivals, b)
    for lock, _, lr, _, _ in inside:
        lock.evidence.setdefault("stats", {})["part_of"] = queue.pattern
        lock.evidence["stats"]["waits_follow_arrivals"] = round(lr, 3)
        lock.confidence = min(lock.confidence, 0.9 * queue.confidence)
        if len(elsewhere) >= EVERYWHERE:  # every await waits: the process's threads, not a lock
            lock.confidence = min(lock.confidence, HELD)
            lock.evidence["stats"]["unrelated_waits"] = elsewhere
            lock.evidence["summary"] += (
                f" Work that does not take it waits with the bursts as well ({', '.join(elsewhere[:3])}): "
                "the process runs short of what all its work needs (threads, the event loop), not of a "
                "lock."
            )
        lock.evidence["summary"] += (
            f" Its waits come with the bursts of arrivals (r={lr:.2f}, dispersion {spread:.1f}) while "
            "calls queue before the handler: more requests came than the process runs at once, and "
            "they fill it; part of the queueing finding."
        )
    return findings
