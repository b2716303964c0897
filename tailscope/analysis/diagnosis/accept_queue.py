"""Waiting for a worker slot before the server's handler starts: queueing that shows as a client-server
gap (used by network.py).

Mechanism. A server with a fixed pool of workers (threads, processes, event-loop slots) starts a
call's SERVER span only when a worker is free; until then the call waits in the accept queue and the
time shows as the gap between the CLIENT span's start and the SERVER span's start. The wire delays a
call whatever the server is doing; a queue delays it only when the server is busy. So where the
large gaps sit before the server span (not after it) and the wait before the handler grows with the
number of calls the server instance was already running when the call was sent (Spearman rho), it is
queueing, not the network. The finding names the server's service and instances.

A fixed pool also puts a ceiling on the calls an instance runs at once: a call waits only when every
slot is taken. So where the large gaps are sent almost only while the instance runs at its ceiling
(its 99th percentile of running calls) while most calls are sent below it, the gaps are a wait for a
slot even when the wait is too rare to move the rank correlation (a healthy service at ordinary load).
The share of the large gaps so explained (at_ceiling) discounts the network finding, without raising
a queueing finding of its own. So does the calm test (`calm_gaps`): the wire delays calls sent to a
calm server instance (at most its 25th percentile of running calls) as often as any; a wait for a
worker almost never happens there. Large gaps at a small fraction of their overall rate among calls
sent to a calm instance are a wait for a busy server, not the wire.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, ms, spearman
from tailscope.analysis.diagnosis.where import busiest, main_service

ADVICE = (
    "Calls to {server} wait before its handler starts, and the wait grows with the number of calls "
    "the instance is already serving: they queue for a worker slot (a thread or process pool, an "
    "accept backlog), not on the wire. Add workers or replicas for the peak (autoscale on in-flight "
    "calls or queue wait rather than CPU), keep spare warm capacity for bursts, bound the queue and shed "
    "load beyond it, and make each call hold its worker for less time (the server's own work)."
)


def running_at(f, srv: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per call: how many calls its server's instance was running at `at`: every SERVER span of the
    server's services there, those with no parent included (a client that is not traced still holds a
    worker, and its calls are what fills the pool when only its load grew)."""
    horizon = int(max(f.end.max(), at.max(initial=0))) + 2
    held = np.nonzero((f.kind == KIND_SERVER) & np.isin(f.service, np.unique(f.service[srv])))[0]
    inst = f.instance[held].astype(np.int64) * horizon
    starts = np.sort(inst + f.start[held])
    ends = np.sort(inst + f.end[held])
    key = f.instance[srv].astype(np.int64) * horizon + at
    return (np.searchsorted(starts, key, side="right") - np.searchsorted(ends, key, side="right")).astype(
        np.float64
    )


CALM_EXPECTED = 8.0  # large gaps expected among the calm calls where the wire delays them alike


def calm_gaps(f, cli: np.ndarray, srv: np.ndarray, big: np.ndarray) -> float:
    """0..1, that the large gaps are a wait for a busy server rather than the wire: their rate among
    the calls sent while the server's instance ran at most its 25th percentile of running calls,
    against their rate over all calls (about 1 for the wire, about 0 for a wait for a worker). 0 where
    too few calls are calm to tell (fewer than CALM_EXPECTED large gaps would be expected there)."""
    if not big.any():
        return 0.0
    busy = running_at(f, srv, f.start[cli])
    calm = busy <= np.quantile(busy, 0.25)
    rate = float(big.mean())
    if rate * calm.sum() < CALM_EXPECTED:
        return 0.0
    return 1.0 - logistic(float(big[calm].mean()) / rate, 0.35, 0.08)


def at_ceiling(f, srv: np.ndarray, busy: np.ndarray, big: np.ndarray, waited: np.ndarray) -> float:
    """The share of the large gaps that are a wait for a slot: if a share q of them waited for a full
    instance (sent at its ceiling, the 99th percentile of its running calls, and `waited`: most of the
    gap before the handler) and the rest were sent at random moments (at the ceiling as often as any
    call, p), a share q + (1 - q) p of them is sent at the ceiling; this returns q."""
    inst = f.instance[srv]
    ceiling = np.zeros(len(f.instances))
    for i in np.unique(inst):
        ceiling[i] = np.quantile(busy[inst == i], 0.99)
    full = busy >= np.maximum(ceiling[inst], 1)
    everyone = float(full.mean())
    return max(float((full & waited)[big].mean()) - everyone, 0.0) / max(1.0 - everyone, 1e-9)


def accept_wait(ctx: Context, cli: np.ndarray, srv: np.ndarray, big: np.ndarray, share: float):
    """(strength in 0..1 that the large gaps are an accept queue, the queueing finding or None). Calls
    to several services are judged per server (each has its own workers: calls to a fast one, never
    waiting, would hide the queue of a slow one), the strength weighed by each one's large gaps and
    the finding the surest server's, on the share of the tail excess its wait carries."""
    f = ctx.frame
    servers = np.unique(f.service[srv])
    if len(servers) == 1:
        return _accept_wait(ctx, cli, srv, big, share)
    strength, best = 0.0, None
    for code in servers.tolist():
        mine = f.service[srv] == code
        if mine.sum() < 50 or big[mine].sum() < 10:
            continue
        pre = np.maximum(f.start[srv[mine]] - f.start[cli[mine]], 0).astype(np.float64)
        req = f.request[cli[mine]]
        req = np.where(req >= 0, req, f.request[srv[mine]])  # a client around the root: its server's
        ok = req >= 0
        per_req = np.bincount(req[ok], weights=pre[ok], minlength=ctx.n_requests)
        got, finding = _accept_wait(ctx, cli[mine], srv[mine], big[mine], excess_share(per_req, ctx.split))
        strength += got * big[mine].sum() / max(big.sum(), 1)
        if finding is not None and (best is None or finding.confidence > best.confidence):
            best = finding
    return strength, best


def _accept_wait(ctx: Context, cli: np.ndarray, srv: np.ndarray, big: np.ndarray, share: float):
    f = ctx.frame
    if big.sum() < 10:
        return 0.0, None
    pre = np.maximum(f.start[srv] - f.start[cli], 0).astype(np.float64)
    post = np.maximum(f.end[cli] - f.end[srv], 0).astype(np.float64)
    excess_pre = float(pre[big].mean() - np.median(pre))
    excess_post = float(post[big].mean() - np.median(post))
    before = excess_pre / max(excess_pre + excess_post, 1.0)
    busy = running_at(f, srv, f.start[cli])
    rho = spearman(busy, pre)
    strength = logistic(rho, 0.4, 0.08) * logistic(before, 0.7, 0.08)
    # the wait for a slot of a fixed pool: large gaps sent only while the instance is full
    full = at_ceiling(f, srv, busy, big, pre > post)
    if strength < 0.05:
        return max(strength, full), None
    server = main_service(f, srv)
    instances = busiest(f, f.instance[srv[big]])
    p50, p99 = np.quantile(pre, [0.5, 0.99])
    calm, crowded = np.quantile(busy, [0.25, 0.9])
    summary = (
        f"Calls to {server} wait before its handler starts: {before:.0%} of the large client-server gaps "
        f"is before the SERVER span (p50 {ms(p50):.2f} ms, p99 {ms(p99):.2f} ms), and that wait grows "
        f"with the calls the instance was already running when the call was sent (Spearman {rho:.2f}; "
        f"{calm:.0f} running at the 25th percentile, {crowded:.0f} at the 90th): a queue for a worker "
        f"slot, not the wire. It carries {share:.0%} of the tail excess (instances: {', '.join(instances)})."
    )
    stats = {
        "wait_before_handler_p50_ms": ms(p50),
        "wait_before_handler_p99_ms": ms(p99),
        "share_of_large_gaps_before_handler": round(before, 3),
        "spearman_wait_vs_running": round(rho, 3),
        "running_p25": float(calm),
        "running_p90": float(crowded),
        "tail_excess_share": round(share, 3),
        "service": server,
        "instances": instances,
    }
    order = np.argsort(busy, kind="stable")
    pick = order[np.linspace(0, len(order) - 1, min(len(order), 2000)).astype(np.int64)]
    chart = {
        "kind": "wait_vs_running",
        "running": busy[pick].tolist(),
        "wait_ms": (pre[pick] / 1e6).round(3).tolist(),
    }
    confidence = clamp01(strength * logistic(share, 0.3, 0.08))
    stats["arrival_rate_at_large_waits"] = round(arrival_rate_at(f, cli, big, ctx), 3)
    ctx.notes["accept_queue_strength"] = strength  # burst_waits.py
    ctx.notes["accept_queue"] = (cli, srv, big)  # held_slots.py: who held the slots the calls waited for
    evidence = {"summary": summary, "stats": stats, "chart": chart}
    finding = Finding("queueing", confidence, "queue", None, evidence, ADVICE.format(server=server))
    return max(strength, full), finding


def arrival_rate_at(f, cli: np.ndarray, big: np.ndarray, ctx: Context) -> float:
    """The calls' arrival rate just before the large gaps (over 5 median request latencies) against the
    run's mean rate: about 2 where a burst of traffic fills the pool, about 1 where the slots were held
    longer at an ordinary rate."""
    sent = np.sort(f.start[cli])
    if len(sent) < 2 or not big.any():
        return 1.0
    width = 5.0 * max(float(np.median(ctx.frame.requests.latency)), 1.0)
    at = f.start[cli[big]]
    count = np.searchsorted(sent, at, side="right") - np.searchsorted(sent, at - width, side="left")
    mean = len(sent) * width / max(float(sent[-1] - sent[0]), 1.0)
    return float(count.mean() / max(mean, 1e-9))
