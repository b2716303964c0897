"""cold_start where instances are many and short-lived: each new instance's first request carries its start.

Mechanism. A serverless function (or any autoscaler that starts an instance for the request that found
none idle) runs one request at a time per execution environment; a new environment runs its init
(runtime start, imports, model load, first connections) before its first request, whose caller waits
through it. The init shows inside the instance's first SERVER span (an init child, or nothing) or, where
the platform starts the span only once the init is done, as the time between the caller's CLIENT span's
start and that SERVER span's start. Such instances serve a few requests each, too few for the warm-up
curve of cold_start.py, and there are tens to hundreds of them.

The same holds for a task queue's worker process that loads its model on its first task: its entry span
is a CONSUMER span (a message processed), inside the request that waits for the result.

Statistic. Per instance, the requests it served (its SERVER or CONSUMER spans in order of start), each
timed as its caller saw it (the caller's CLIENT span where there is one, so a wait before the span
counts); only instances that appear after the first 5 % of the run (they did start then). The first
request against (a) the same instance's later ones (AUC within instance, ratio of medians) and (b) the
other instances' non-first requests of the same service that started nearest in time (ratio of medians):
a burst that slows every request (a queue) makes a new instance's first request no slower than its
neighbours', and a rare slow path (a cache miss) falls on first requests no more often than on others.
Strength = logistic(AUC, 0.72, 0.05) x logistic(min ratio, 1.4, 0.15); weight: the first requests' time
over their instance's later median as a share of the tail excess. New instances started at random
moments (their starts' index of dispersion over 50 time bins < 3) and rarely (< 2 % of requests) are the
platform's usual recycling, as a steady miss rate is a cache's normal cost: held at 0.45.

`settle`: a finding on a span name whose time per request over its median, or whose tail excess, is
mostly (>= 70 %) in the requests that were a new instance's first (a proxy tier's call above the
request counts for it) is that cold start: a bimodal 'cache' span whose slow mode is the init, a client
span whose gap is the wait for an environment to start, a fallback that every first request runs. It is
held below 0.5 and marked part of the cold start. So is a lock_contention finding whose tail excess is
mostly the warm-up requests of cold_start.py's curve (>= 0.5): a cold process's slow first requests
overlap more, and a span's time rises with the requests in it without a lock.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import (
    TailSplit,
    clamp01,
    excess_share,
    logistic,
    material_weight,
    ranks,
    tail_split,
)
from tailscope.analysis.diagnosis.where import busiest

PATTERN = "cold_start"
# a process's entry spans: a request served (SERVER), a message processed (CONSUMER: a task queue's
# worker that loads its model on its first task)
ENTRY_KINDS = (KIND_SERVER, SPAN_KINDS.index("Consumer"))
MECHANISM = "a new instance's first request carries its start"
MIN_INSTANCES = 8  # new instances with a first and a later request
FRESH = 0.05  # an instance first seen after this share of the run started then
NEIGHBOURS = 20  # other instances' requests nearest in time a first request is compared with
CAP = 0.95
PART = 0.7  # share of a name's tail excess from first requests above which a finding is the cold start
HELD = 0.45
STORM = 3.0  # index of dispersion of the new instances' starts over 50 time bins: clustered above
OFTEN = 0.02  # share of the requests that were a new instance's first above which starts are frequent


def _served(ctx: Context):
    """(SERVER spans of requests in start order, the time their caller saw, their instance, index on
    the instance, whether the instance is new), cached in ctx.notes."""
    if "first_calls" in ctx.notes:
        return ctx.notes["first_calls"]
    f = ctx.frame
    srv = np.nonzero(np.isin(f.kind, ENTRY_KINDS) & (f.request >= 0))[0]
    srv = srv[np.argsort(f.start[srv], kind="stable")]
    parent = f.parent[srv]
    called = (parent >= 0) & (f.kind[np.maximum(parent, 0)] == KIND_CLIENT)
    called &= f.instance[np.maximum(parent, 0)] != f.instance[srv]
    seen = np.where(called, f.dur[np.maximum(parent, 0)], f.dur[srv]).astype(np.float64)
    inst = f.instance[srv]
    order = np.lexsort((f.start[srv], inst))
    index = np.empty(len(srv), np.int64)
    if len(srv):
        s_inst = inst[order]
        head = np.r_[True, s_inst[1:] != s_inst[:-1]]
        starts = np.nonzero(head)[0]
        index[order] = np.arange(len(srv)) - np.repeat(starts, np.diff(np.r_[starts, len(srv)]))
    run0, run1 = float(f.start.min()), float(f.end.max())
    first_seen = np.full(len(f.instances), np.inf)
    np.minimum.at(first_seen, inst, f.start[srv].astype(np.float64))
    new = (first_seen > run0 + FRESH * (run1 - run0))[inst]
    out = (srv, seen, inst, index, new)
    ctx.notes["first_calls"] = out
    return out


def _seen_split(ctx: Context) -> TailSplit:
    """The tail as the callers see it: where most requests come with their caller's CLIENT span (a
    proxy tier's call), its latency, which holds a wait for an instance to start before the root's
    own span; else the requests' own."""
    reqs = ctx.frame.requests
    wrapped = ~np.isnan(reqs.client_latency)
    if wrapped.mean() < 0.5:
        return ctx.split
    if "first_calls_split" not in ctx.notes:
        seen = np.where(wrapped, reqs.client_latency, reqs.latency.astype(np.float64))
        ctx.notes["first_calls_split"] = tail_split(seen, reqs.weight)
    return ctx.notes["first_calls_split"]


def _later_vs_first(seen: np.ndarray, inst: np.ndarray, first: np.ndarray, later: np.ndarray,
                    n_instances: int) -> tuple[np.ndarray, float]:
    """(per instance: the median of its later requests, 0 where none; the probability that an
    instance's first request is slower than one of its later ones, pooled over instances), without a
    loop over instances (a serverless run has thousands)."""
    k = np.nonzero(later)[0]
    order = np.lexsort((seen[k], inst[k]))
    k = k[order]
    counts = np.bincount(inst[k], minlength=n_instances)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    plateau = np.zeros(n_instances)
    has = counts > 0
    lo, hi = starts[has] + (counts[has] - 1) // 2, starts[has] + counts[has] // 2
    plateau[has] = (seen[k][lo] + seen[k][hi]) / 2.0
    firsts = np.nonzero(first & has[inst])[0]
    if len(firsts) == 0:
        return plateau, 0.5
    sel = np.r_[k, firsts]
    r = ranks(seen[sel])  # ranks over both, ties averaged: equal times count a half
    key_later = inst[k] * (len(sel) + 1.0) + r[: len(k)]
    key_first = inst[firsts] * (len(sel) + 1.0) + r[len(k):]
    below = np.searchsorted(key_later, key_first, "left") - starts[inst[firsts]]
    tied = np.searchsorted(key_later, key_first, "right") - starts[inst[firsts]] - below
    pairs = float(counts[inst[firsts]].sum())
    return plateau, float((below + 0.5 * tied).sum() / pairs) if pairs else 0.5


def detect(ctx: Context, advice: str) -> list[Finding]:
    """`advice`: cold_start's advice text with a `{where}` field."""
    f = ctx.frame
    if ctx.n_requests < 100:
        return []
    srv, seen, inst, index, new = _served(ctx)
    best = None
    for svc in np.unique(f.service[srv]).tolist():
        mine = f.service[srv] == svc
        first, later = mine & new & (index == 0), mine & new & (index > 0)
        with_later = np.isin(inst, inst[later])
        first &= with_later
        if first.sum() < MIN_INSTANCES:
            continue
        plateau, auc = _later_vs_first(seen, inst, first, later, len(f.instances))
        ratio_self = float(np.median(seen[first] / np.maximum(plateau[inst[first]], 1.0)))
        pool = np.nonzero(mine & (index > 0))[0]  # other instances' settled requests, in start order
        if len(pool) < NEIGHBOURS:
            continue
        at = np.searchsorted(f.start[srv[pool]], f.start[srv[first]])
        lo = np.clip(at - NEIGHBOURS // 2, 0, len(pool) - NEIGHBOURS)
        near = np.median(seen[pool[lo[:, None] + np.arange(NEIGHBOURS)]], axis=1)
        ratio_near = float(np.median(seen[first] / np.maximum(near, 1.0)))
        strength = logistic(auc, 0.72, 0.05) * logistic(min(ratio_self, ratio_near), 1.4, 0.15)
        extra = np.maximum(seen[first] - plateau[inst[first]], 0.0)
        per_request = np.bincount(f.request[srv[first]], weights=extra, minlength=ctx.n_requests)
        share = excess_share(per_request, _seen_split(ctx))
        confidence = CAP * strength * material_weight(share)
        if best is None or confidence > best[0]:
            best = (confidence, svc, first, {
                "new_instances": int(first.sum()),
                "first_median_ms": round(float(np.median(seen[first])) / 1e6, 3),
                "later_median_ms": round(float(np.median(seen[later & mine])) / 1e6, 3),
                "ratio_to_own_later": round(ratio_self, 2), "ratio_to_neighbours": round(ratio_near, 2),
                "auc": round(auc, 3), "tail_excess_share": round(min(share, 1.0), 3), "mechanism": MECHANISM})
    if best is None or best[0] < 0.05:
        return []
    confidence, svc, first, st = best
    # new instances started now and then at random moments (recycled environments, a placement here
    # and there) are the platform's normal cost, as a steady cache miss rate is: a cause where they come
    # in a storm (a scale-out, clustered in time) or often
    bins = np.histogram(f.start[srv[first]], bins=50, range=(0, int(f.end.max())))[0]
    dispersion = float(bins.var() / max(bins.mean(), 1e-9))
    rate = float(first.sum() / ctx.n_requests)
    st.update(start_dispersion=round(dispersion, 2), first_request_rate=round(rate, 4))
    steady = dispersion < STORM and rate < OFTEN
    if steady:
        confidence = min(confidence, HELD)
    requests = np.zeros(ctx.n_requests, bool)
    requests[f.request[srv[first]]] = True
    if confidence >= 0.3:  # settle() and compute_bound leave these requests' extra time to this finding
        ctx.notes["first_call_requests"] = requests
        warm = ctx.notes.get("warm_up_requests")
        ctx.notes["warm_up_requests"] = requests if warm is None else warm | requests
    where = busiest(f, inst[first], seen[first])
    service = f.services[svc]
    span = int(np.bincount(f.name[srv[first]]).argmax())
    summary = (
        f"{st['new_instances']} instances of {service} started during the run, and the first request each "
        f"served was slow: median {st['first_median_ms']} ms (as its caller saw it) against "
        f"{st['later_median_ms']} ms for their later ones ({st['ratio_to_own_later']}x, AUC {st['auc']}) "
        f"and {st['ratio_to_neighbours']}x the other instances' requests at the same moments (not a busy "
        f"spell): each new instance's start (init) is paid by its first request; these first requests "
        f"carry {st['tail_excess_share']:.0%} of the tail excess."
        + (f" They started at random moments ({rate:.1%} of requests, dispersion {dispersion:.1f}): a "
           "platform's usual recycling, not a scale-out storm." if steady else
           f" They came {f'in a storm (dispersion {dispersion:.1f})' if dispersion >= STORM else 'often'}"
           f" ({rate:.1%} of requests).")
    )
    stats = {"service": service, "instances": where, **st}
    return [Finding(PATTERN, clamp01(confidence), ctx.stage_of_name(span), f.names[span],
                    {"summary": summary, "stats": stats},
                    advice.format(where=f"each new {service} instance's first request"))]


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Findings on a span name whose tail excess is mostly the first requests of new instances (with a
    cold_start finding of this mechanism at >= 0.5) are that cold start: held at HELD, marked part of it.
    So is a lock_contention finding whose tail excess is mostly the warm-up requests of a cold_start
    finding of cold_start.py's (>= 0.5, its warm-up curve): a process's first requests run slow (JIT,
    empty caches), so more of them overlap on it, and the span's time rises with the requests in it
    without a lock."""
    cold = [fd for fd in findings if fd.pattern == PATTERN and fd.confidence >= 0.5
            and fd.evidence.get("stats", {}).get("mechanism") == MECHANISM]
    requests = ctx.notes.get("first_call_requests")
    if requests is not None and cold:
        _hold(ctx, findings, requests, None)
    warm_up = ctx.notes.get("warm_up_requests")
    if warm_up is not None and any(fd.pattern == PATTERN and fd.confidence >= 0.5 and "warmup_requests_per_"
                                   "instance" in fd.evidence.get("stats", {}) for fd in findings):
        _hold(ctx, findings, warm_up, "lock_contention")
    return findings


def _hold(ctx: Context, findings: list[Finding], requests: np.ndarray, pattern: str | None) -> None:
    """Hold at HELD the findings (of `pattern`, or any but cold_start) whose span name's extra time per
    request, or tail excess, is mostly (>= PART) in `requests`."""
    f = ctx.frame
    reqs = f.requests
    # a request's client wrapper (the proxy tier's call above its root) counts for that request
    owner = f.request.copy()
    wrapped = reqs.client_span >= 0
    owner[reqs.client_span[wrapped]] = np.nonzero(wrapped)[0]
    for fd in findings:
        if fd.pattern == PATTERN or fd.confidence < 0.5 or not fd.span_name or fd.span_name not in f.names:
            continue
        if pattern is not None and fd.pattern != pattern:
            continue
        spans = np.nonzero((f.name == f.names.index(fd.span_name)) & (owner >= 0))[0]
        if len(spans) == 0:
            continue
        # per request (0 where it has none of the spans: a call on some requests only)
        per_request = np.bincount(owner[spans], weights=f.dur[spans].astype(np.float64), minlength=len(reqs))
        over = np.maximum(per_request - np.median(per_request), 0.0)
        part = float(over[requests].sum() / max(over.sum(), 1.0))
        # or the tail it carries is the first requests' (a call they all make, few others): the tail
        # as the callers see it for a call above the requests (a wait for an instance is in it only)
        split = _seen_split(ctx) if (f.request[spans] < 0).mean() > 0.5 else ctx.split
        whole = excess_share(per_request, split)
        if whole > 0:
            part = max(part, excess_share(np.where(requests, per_request, 0.0), split) / whole)
        if part < PART:
            continue
        fd.confidence = min(fd.confidence, HELD)
        fd.evidence.setdefault("stats", {})["part_of"] = PATTERN
        fd.evidence["summary"] += (
            f" {min(part, 1.0):.0%} of what '{fd.span_name}' adds to slow requests is in the requests that "
            "were a new instance's first: part of the cold start."
        )
