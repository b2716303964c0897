"""queueing on one process's executor: blocking calls hold its threads, so every task waits to start.

Mechanism. An asynchronous server runs each request as a chain of tasks on a shared thread pool (an
Akka dispatcher, Netty's event loops, a ForkJoinPool, a Node worker pool): after each step its
continuation is queued for a free thread. A blocking call run on that pool (a JDBC query on the default
dispatcher) holds a thread for the call's whole duration; when such calls hold all of them, every
continuation of every request on that process waits for a thread. No lock is held (nothing is
serialised on one holder), no collector runs, nothing stops: the steps themselves run as fast as
anywhere once they start. What grows is the time *between* a request's steps, in the request's own
span, at every step boundary, on that process only.

Statistic, per service with >= 2 instances serving its request roots: per request, the root's own
time in gaps between its direct children (and before the first, after the last), outside the
instances' warm-up. An instance is *starved* where its requests' gap time at the p90 is >= RATIO x its
peers' (and >= MIN_GAP_NS over it), while its children's durations are no slower than its peers'
(their p90 under CHILD_RATIO x: a stop or a CPU quota stretches the steps in flight too). The extra gap
time of its slow requests must be spread over the step boundaries (the largest boundary holds at most
SPREAD of it) for more than ONE_BOUNDARY_CAP: one untraced step or one lock taken at one point in the
handler puts it all at one boundary (and so does a request whose steps run side by side and join once:
its one continuation waits). Weight: the gaps' time over the peers' median as a share of the tail
excess. At most CAP: which blocking work holds the threads is not traced (look for calls on that
instance that run on the request's own executor).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.long_stalls import warm_up_mask
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.queueing import ADVICE as QUEUE_ADVICE
from tailscope.analysis.diagnosis.stats import clamp01, material_weight, ms

PATTERN = "queueing"
RATIO = 5.0
MIN_GAP_NS = 5_000_000
CHILD_RATIO = 1.5
SPREAD = 0.7
CAP = 0.6
ONE_BOUNDARY_CAP = 0.45
MIN_REQUESTS = 50
ADVICE = (
    "Work on one process waits for a thread of its own executor between its steps: something blocking "
    "holds the pool's threads (a JDBC or file call, a synchronous client, a sleep run on the default "
    "dispatcher or an event loop). Run blocking calls on a dedicated, bounded pool (Akka: a "
    "blocking-io-dispatcher; Vert.x: executeBlocking with its own pool; Netty: an EventExecutorGroup), or "
    "use a non-blocking client; watch the executor's queue length and active threads. "
) + QUEUE_ADVICE


def _gaps(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request: the root's own time in gaps between its direct children on its instance, the
    largest single gap, and the children's count."""
    f = ctx.frame
    reqs = f.requests
    n = len(reqs)
    root = reqs.root
    is_root = np.full(len(f), -1, np.int64)
    is_root[root] = np.arange(n)
    kids = np.nonzero((f.parent >= 0) & (f.request >= 0))[0]
    kids = kids[is_root[f.parent[kids]] >= 0]
    kids = kids[f.instance[kids] == f.instance[f.parent[kids]]]
    r = is_root[f.parent[kids]]
    if not len(kids):
        return np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
    order = np.lexsort((f.start[kids], r))
    kids, r = kids[order], r[order]
    s, e = f.start[kids].astype(np.int64), (f.start[kids] + f.dur[kids]).astype(np.int64)
    first = np.r_[True, r[1:] != r[:-1]]
    # the latest end so far within the request (steps may overlap): a running max per request
    big = int(e.max(initial=0)) + 1
    if big * (n + 1) < 2**62:  # offset each request's ends so that one running max serves them all
        reach = np.maximum.accumulate(e + r * big) - r * big
    else:
        reach = e.copy()
        for k in np.nonzero(~first)[0].tolist():
            reach[k] = max(reach[k], reach[k - 1])
    prev = np.where(first, f.start[root][r], np.r_[0, reach[:-1]])
    gap = np.maximum(s - prev, 0).astype(np.float64)
    last = np.r_[r[1:] != r[:-1], True]
    tail_gap = np.maximum(f.start[root][r[last]] + f.dur[root][r[last]] - reach[last], 0).astype(np.float64)
    total = np.bincount(r, weights=gap, minlength=n)
    total[r[last]] += tail_gap
    biggest = np.zeros(n)
    np.maximum.at(biggest, r, gap)
    biggest[r[last]] = np.maximum(biggest[r[last]], tail_gap)
    count = np.bincount(r, minlength=n)
    return total, biggest, count


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    if len(reqs) < 100:
        return []
    total, biggest, count = _gaps(ctx)
    ok = ~warm_up_mask(ctx) & (count >= 2)
    inst = f.instance[reqs.root]
    svc = f.service[reqs.root]
    best: Finding | None = None
    for s in np.unique(svc[ok]).tolist():
        mine = ok & (svc == s)
        insts = [i for i in np.unique(inst[mine]).tolist() if (mine & (inst == i)).sum() >= MIN_REQUESTS]
        if len(insts) < 2:
            continue
        p90 = {i: float(np.quantile(total[mine & (inst == i)], 0.9)) for i in insts}
        for i in insts:
            peers = [p for p in insts if p != i]
            base = float(np.median([p90[p] for p in peers]))
            if p90[i] < RATIO * max(base, 1.0) or p90[i] - base < MIN_GAP_NS:
                continue
            slowed = _children_slowed(ctx, i, peers)
            if slowed >= CHILD_RATIO:
                continue
            here = mine & (inst == i)
            usual = float(np.median(total[mine & (inst != i)]))
            extra = np.where(here, np.maximum(total - usual, 0.0), 0.0)
            slow = here & (total >= p90[i] * 0.5)
            at_one = float(np.maximum(biggest[slow] - usual, 0).sum() / max(extra[slow].sum(), 1.0))
            # all of it at one boundary: one lock or one untraced step there is not ruled out (a possible
            # cause only); spread over the boundaries, every continuation waited
            cap = CAP if at_one < SPREAD else ONE_BOUNDARY_CAP
            values = np.zeros(len(f))
            values[reqs.root] = extra
            mask = np.zeros(len(f), bool)
            mask[reqs.root] = here
            share = ctx.share_of(mask, values)
            confidence = clamp01(cap * material_weight(share))
            if best is not None and confidence <= best.confidence:
                continue
            stats = {
                "mechanism": "starved executor",
                "services": [f.services[s]],
                "instances": [f.instances[i]],
                "gap_p90_ms": ms(p90[i]),
                "peer_gap_p90_ms": ms(base),
                "children_p90_ratio": round(slowed, 2),
                "largest_boundary_share": round(at_one, 3),
                "tail_excess_share": round(share, 3),
            }
            summary = (
                f"On {f.instances[i]} ({f.services[s]}) requests wait between their steps: the request's own "
                f"time outside its steps is {ms(p90[i]):.1f} ms at the p90 against {ms(base):.1f} ms on its "
                f"other instances, while the steps themselves run no slower there (p90 {slowed:.2f}x its "
                f"peers'; the largest step boundary holds {at_one:.0%} of the wait): the continuations "
                "waited for a thread of the process's executor, held by blocking work (a call run on the "
                "shared pool); not a stop or a CPU quota (those stretch the steps in flight)"
                + ("" if at_one < SPREAD else ", though with the wait at one boundary a lock taken there is "
                   "not ruled out")
                + f"; carrying {share:.0%} of the tail excess. What holds the threads is not traced."
            )
            stats["request_span"] = f.names[int(f.name[reqs.root[here][0]])]
            # no span name: the wait is between the request's spans, in none of them (and a queue finding
            # on a span inside the request is another wait, not to be merged with this one)
            best = Finding(PATTERN, confidence, "queue", None, {"summary": summary, "stats": stats}, ADVICE)
    return [best] if best is not None and best.confidence >= 0.05 else []


def _children_slowed(ctx: Context, inst: int, peers: list[int]) -> float:
    """The largest ratio, over the roots' direct children's names, of their p90 duration on `inst` to
    their p90 on the peers (names with >= 20 spans on both)."""
    f = ctx.frame
    root = np.zeros(len(f), bool)
    root[f.requests.root] = True
    kids = np.nonzero((f.parent >= 0) & (f.request >= 0))[0]
    kids = kids[root[f.parent[kids]] & (f.instance[kids] == f.instance[f.parent[kids]])]
    worst = 0.0
    for code in np.unique(f.name[kids]).tolist():
        named = kids[f.name[kids] == code]
        a = f.dur[named[f.instance[named] == inst]]
        b = f.dur[named[np.isin(f.instance[named], peers)]]
        if len(a) >= 20 and len(b) >= 20:
            worst = max(worst, float(np.quantile(a, 0.9)) / max(float(np.quantile(b, 0.9)), 1.0))
    return worst
