"""lock_contention: requests that wait for a pooled connection before their first query, where the
wait has no span of its own (a per-process pool that runs dry: ActiveRecord's, a JDBC pool).

Mechanism. A process's threads share a pool of P connections; a request leases one at its first
query and (in ActiveRecord, per thread) holds it until the request ends. With more threads than
connections, a request whose turn comes while P others hold a lease waits before its first query,
and the wait ends when one of them ends and gives its connection back. Nothing traces the checkout:
the wait is time in the caller's handler before its first call of the peer (after the call before
it, or the handler's start); where a span of its own holds the checkout, lock_contention.py reads it.
So, for a CLIENT name called by most requests:

- the gap before each request's first call of the name is long (over LONG x the median gap and 1 ms)
  for some requests,
- those long gaps end (the first call starts) right after another request that held a lease on the
  same instance ended (beyond what chance gives for the rate of request ends there): a handoff,
- and they start only while several other requests on the instance hold a lease (at least the pool's
  size: the 10th percentile of holders at the long gaps' starts), where the requests that did not wait
  mostly found fewer.

A slow peer makes the calls long, not the gap before them; a stopped process (a pause, a lock on the
interpreter) makes gaps anywhere, that end when the process runs again, not when another request ends.
Confidence: the handoff share (observed - chance) / (1 - chance) x the material weight of the gaps'
share of the tail excess; at most 0.45 where requests waited with fewer holders than the pool's size
as often (no threshold: not a pool).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "lock_contention"
LONG = 5.0
MIN_WAITS = 20
HANDOFF_NS = 2_000_000
MAX_CHANCE = 0.5
ADVICE = (
    "Requests on {where} wait for a database connection before their first query: the process's pool "
    "(about {pool} connections) is held by other requests, and each wait ends when one of them finishes "
    "and gives its connection back. Make the pool at least as large as the threads that use it (Rails: "
    "`pool` in database.yml >= RAILS_MAX_THREADS), release connections as soon as the queries are done "
    "rather than at the end of the request, and keep slow queries (which hold a connection longer) off "
    "the request path."
)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    n = ctx.n_requests
    if n < 100 or ctx.split.excess_ns <= 0:
        return []
    cli = np.nonzero((f.kind == KIND_CLIENT) & (f.request >= 0) & (f.parent >= 0))[0]
    findings = []
    for code in np.unique(f.name[cli]).tolist():
        spans = cli[f.name[cli] == code]
        order = np.lexsort((f.start[spans], f.request[spans]))
        spans = spans[order]
        first = spans[np.r_[True, f.request[spans][1:] != f.request[spans][:-1]]]
        # made in the handler's own time: a wait inside a span of its own (a section around the
        # checkout) is that span's, which lock_contention.py reads
        if len(first) < 0.5 * n or float((f.kind[f.parent[first]] == KIND_SERVER).mean()) < 0.5:
            continue
        finding = _judge(ctx, int(code), first)
        if finding is not None:
            findings.append(finding)
    findings.sort(key=lambda x: -x.confidence)
    return findings[:1]


def _handler(f, calls: np.ndarray) -> np.ndarray:
    """Per call: the SERVER span it is made under (its nearest SERVER ancestor): the request's lease
    on the caller's pool ends with it."""
    up = f.parent[calls]
    for _ in range(16):
        climb = (up >= 0) & (f.kind[np.maximum(up, 0)] != KIND_SERVER)
        if not climb.any():
            break
        up = np.where(climb, f.parent[np.maximum(up, 0)], up)
    return np.where(up >= 0, up, f.requests.root[np.maximum(f.request[calls], 0)])


def _gap_before(f, calls: np.ndarray) -> np.ndarray:
    """Per call: its start minus the latest end, before it, of a sibling (same parent), or minus the
    parent's start where no sibling ended before it."""
    sib = np.nonzero(np.isin(f.parent, np.unique(f.parent[calls])))[0]
    horizon = int(f.end.max()) + 2
    keys = np.sort(f.parent[sib].astype(np.int64) * horizon + f.end[sib])
    at = f.parent[calls].astype(np.int64) * horizon + f.start[calls]
    k = np.searchsorted(keys, at, side="right") - 1
    prev_end = np.where(
        (k >= 0) & (keys[np.maximum(k, 0)] // horizon == f.parent[calls]),
        keys[np.maximum(k, 0)] % horizon,
        f.start[f.parent[calls]],
    )
    return np.maximum(f.start[calls] - np.maximum(prev_end, f.start[f.parent[calls]]), 0).astype(np.float64)


def _judge(ctx: Context, code: int, first: np.ndarray) -> Finding | None:
    f = ctx.frame
    gap = _gap_before(f, first)
    median = float(np.median(gap))
    wait = gap > max(LONG * median, 1e6)
    if wait.sum() < MIN_WAITS:
        return None
    req = f.request[first]
    inst = f.instance[first].astype(np.int64)  # the caller's process, whose pool it is
    lease_start, lease_end = f.start[first], f.end[_handler(f, first)]
    horizon = int(max(f.end.max(), lease_end.max())) + 2
    starts = np.sort(inst * horizon + lease_start)
    ends = np.sort(inst * horizon + lease_end)
    gap_start = (f.start[first] - gap).astype(np.int64)

    def holders(t: np.ndarray) -> np.ndarray:  # leases held on the instance at t (the request's own not)
        key = inst * horizon + t
        return np.searchsorted(starts, key, side="right") - np.searchsorted(ends, key, side="right")

    held = holders(gap_start)
    pool = max(int(np.quantile(held[wait], 0.1)), 1)
    waited_below = float(wait[held < pool].mean()) if (held < pool).any() else 0.0
    waited_at = float(wait[held >= pool].mean()) if (held >= pool).any() else 0.0
    # hand-off: a lease on the instance ended just before the long gap did
    at = inst[wait] * horizon + f.start[first[wait]]
    found = np.searchsorted(ends, at, side="right") - np.searchsorted(ends, at - HANDOFF_NS, side="left")
    observed = float((found > 0).mean())
    span = max(float(lease_end.max() - lease_start.min()), 1.0)
    per_inst = np.bincount(inst, minlength=int(inst.max()) + 1).astype(np.float64)
    chance = float(np.mean(1.0 - np.exp(-per_inst[inst[wait]] / span * HANDOFF_NS)))
    if chance > MAX_CHANCE:
        return None
    handoff = max(0.0, (observed - chance) / max(1.0 - chance, 1e-9))
    per_request = np.zeros(ctx.n_requests)
    per_request[req] = np.where(wait, gap, 0.0)
    share = clamp01(excess_share(per_request, ctx.split))
    confidence = logistic(handoff, 0.5, 0.1) * material_weight(share)
    threshold = waited_at >= 3.0 * max(waited_below, 0.01)
    if not threshold:
        confidence = min(confidence, 0.45)
    if confidence < 0.05:
        return None
    name = f.names[code]
    service = main_service(f, first)
    instances = busiest(f, f.instance[first[wait]])
    summary = (
        f"{int(wait.sum())} requests ({wait.mean():.1%}) wait before their first '{name}' (p50 of those "
        f"waits {ms(float(np.median(gap[wait]))):.1f} ms, against {ms(median):.2f} ms usually), in "
        f"{service}, with no span for the wait: {handoff:.0%} of the waits (beyond the {chance:.0%} chance "
        "gives) end as another request on the same instance that held a connection ends (a hand-off), "
        f"and requests waited in {waited_at:.0%} of the cases where {pool} or more others held one vs "
        f"{waited_below:.0%} where fewer did: a connection pool of about {pool} run dry. The waits carry "
        f"{share:.0%} of the tail excess (instances: {', '.join(instances)})."
    )
    stats = {
        "mechanism": "pool_checkout",
        "waits": int(wait.sum()),
        "wait_p50_ms": ms(float(np.median(gap[wait]))),
        "usual_gap_ms": ms(median),
        "waits_ended_by_handoff": round(handoff, 3),
        "handoff_chance": round(chance, 3),
        "pool_size_estimate": pool,
        "waited_with_pool_held": round(waited_at, 3),
        "waited_with_fewer_holders": round(waited_below, 3),
        "tail_excess_share": round(share, 3),
        "service": service,
        "instances": instances,
    }
    stage = ctx.stage_of_name(code)
    advice = ADVICE.format(where=service, pool=pool)
    return Finding(PATTERN, clamp01(confidence), stage, name, {"summary": summary, "stats": stats}, advice)
