"""A server's wait for capacity: what lock_contention's crowd test finds on a server's whole call is
queueing, not a lock.

Mechanism. lock_contention finds a span whose duration rises with the same-name spans the instance
was already running when it started. A critical section is one step inside a process's work (a span
in the handler, or a handler's own time between its steps). A SERVER span is the server's whole
handling of one call: where its slow spans' extra time is time the server itself names a queue (its
queue-stage child spans: a scheduler's wait for KV-cache blocks or a batch slot, a worker pool's
queue), or time it does not break down at all (a server reported as one span, its internals
untraced), the calls wait for the server's capacity - a continuous-batching scheduler, a batcher, a
pool of workers - and that is queueing: more capacity, not a shorter critical section, removes it.
Where the extra time sits in the server's other child spans (its work, a lock span below it), the
finding stays lock_contention: that child, not the server, is where to look.

The named queue is the stronger evidence: with no child span a lock inside the server is not ruled
out, so the confidence is held at UNTRACED_CAP and the evidence says so. And with no child span the
crowd itself may be the consequence: calls that run slower for a while (a bad rollout on one replica)
are many at once because each lasts longer, so their number and duration rise together over time
without any wait. A queue makes a call wait for the calls ahead at any moment: within (instance, time
bin) the calls ahead must still rank with the duration (`within_time`, >= WITHIN), else the finding is
held below 0.5 (HELD_BELOW).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.pool_release import shared_pool
from tailscope.analysis.diagnosis.queueing import ADVICE
from tailscope.analysis.diagnosis.stats import logistic, pearson, ranks, slow_spans

PATTERN = "queueing"
HELD = 0.5  # share of the slow spans' extra time in the server's queue (or its untraced own time)
UNTRACED_CAP = 0.7  # a server reported as one span: a lock inside it cannot be ruled out
BINS = 20  # time bins within which calls ahead and duration are compared
WITHIN = 0.2  # below this correlation within time bins the crowd came with a slower period: no queue
HELD_BELOW = 0.45


def within_time(ctx: Context, spans: np.ndarray) -> float:
    """Rank correlation of a name's calls ahead at start with its duration, within each (instance, time
    bin): the ranks less their bin's mean. A queue makes a call that starts with more ahead wait longer
    at any moment; calls that merely run slower for a while (a bad rollout, a slower replica) are many
    at once because each lasts longer, and within a stretch of time their number says nothing of their
    duration."""
    f = ctx.frame
    conc = _ahead(f.instance[spans], f.start[spans], f.end[spans])
    d = f.dur[spans].astype(np.float64)
    t = f.start[spans].astype(np.float64)
    b = np.minimum(((t - t.min()) * BINS / max(t.max() - t.min(), 1.0)).astype(np.int64), BINS - 1)
    group = f.instance[spans].astype(np.int64) * BINS + b
    _, g = np.unique(group, return_inverse=True)
    g = g.reshape(-1)
    n = np.maximum(np.bincount(g), 1)
    rc, rd = ranks(conc), ranks(d)
    rc -= (np.bincount(g, weights=rc) / n)[g]
    rd -= (np.bincount(g, weights=rd) / n)[g]
    return pearson(rc, rd) if rc.std() > 0 and rd.std() > 0 else 0.0


def _ahead(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per span: the spans of its group (instance) started strictly before it and still running."""
    horizon = int(end.max(initial=0)) + 2
    s_key = group.astype(np.int64) * horizon + start
    e_key = group.astype(np.int64) * horizon + end
    starts, ends = np.sort(s_key), np.sort(e_key)
    first = group.astype(np.int64) * horizon
    before = np.searchsorted(starts, s_key, "left") - np.searchsorted(starts, first, "left")
    ended = np.searchsorted(ends, s_key, "right") - np.searchsorted(ends, first, "left")
    return np.maximum(before - ended, 0).astype(np.float64)


def where_the_extra_is(ctx: Context, spans: np.ndarray) -> tuple[float, float, int]:
    """For spans of one name: the share of the slow spans' extra time (over twice the median: their
    mean over the others') in their queue-stage children, and in their own (exclusive) time, and the
    most common queue child's name code (-1 where none)."""
    f = ctx.frame
    d = f.dur[spans].astype(np.float64)
    slow = slow_spans(d)
    if slow.sum() < 10 or slow.all():
        return 0.0, 0.0, -1
    extra = float(d[slow].mean() - d[~slow].mean())
    if extra <= 0:
        return 0.0, 0.0, -1
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    kids = np.nonzero(f.parent >= 0)[0]
    kids = kids[pos[f.parent[kids]] >= 0]
    queued = kids[ctx.span_stage_mask("queue")[kids]]
    t = np.bincount(pos[f.parent[queued]], weights=f.dur[queued].astype(np.float64), minlength=len(spans))
    own = f.excl[spans].astype(np.float64)
    in_queue = float(t[slow].mean() - t[~slow].mean()) / extra
    in_own = float(own[slow].mean() - own[~slow].mean()) / extra
    name = int(np.bincount(f.name[queued]).argmax()) if len(queued) else -1
    return in_queue, in_own, name


def recast(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """lock_contention's findings, those on a server's whole call whose extra time is its queue's or
    untraced recast as queueing (see the module docstring)."""
    f = ctx.frame
    out = []
    for fd in findings:
        code = f.names.index(fd.span_name) if fd.span_name in f.names else -1
        spans = np.nonzero((f.name == code) & (f.request >= 0))[0] if code >= 0 else np.zeros(0, np.int64)
        pooled = (fd.evidence["stats"].get("waits_ended_by_pool_release") or 0.0) >= 0.5
        if pooled and shared_pool(ctx, code) and (surge := _arrival_surge(ctx, code)) >= 0.5:
            shared = fd.evidence["stats"]["waits_ended_by_pool_release"]
            queued = _as_queue(fd, fd.confidence, fd.span_name, shared, "a pool shared by every caller")
            queued.evidence["stats"]["waits_follow_arrival_surge"] = round(surge, 3)
            out.append(queued)
            continue
        if len(spans) == 0 or np.mean(f.kind[spans] == KIND_SERVER) < 0.5:
            out.append(fd)
            continue
        in_queue, in_own, queue_name = where_the_extra_is(ctx, spans)
        if in_queue >= HELD and queue_name >= 0:
            out.append(_as_queue(fd, fd.confidence, f.names[queue_name], in_queue, "its queue span"))
        elif in_own >= HELD and f.leaf[spans].mean() >= 0.5:
            within = within_time(ctx, spans)
            cap = UNTRACED_CAP if within >= WITHIN else HELD_BELOW
            queued = _as_queue(fd, min(fd.confidence, cap), fd.span_name, in_own, "untraced")
            queued.evidence["stats"]["calls_ahead_vs_duration_within_time"] = round(within, 3)
            if within < WITHIN:
                queued.evidence["summary"] = queued.evidence["summary"].rstrip(".") + (
                    f"; but within any stretch of time the calls ahead say little of a call's duration "
                    f"(rank correlation {within:.2f}): the calls were many because each ran longer for a "
                    "while (a slower period of the server), not slower because many were ahead.")
            out.append(queued)
        else:
            out.append(fd)
    return out


def _arrival_surge(ctx: Context, code: int) -> float:
    """How surely the waits in span name `code` rise and fall with a surge of arrivals: the lagged
    correlation of its time per request with the arrivals per time bin (burst_waits.follows_arrivals),
    in a run whose arrivals come in bursts (index of dispersion >> 1). A pool every caller shares runs
    dry either way: more calls than its N connections serve (a queue: more capacity, or fewer calls) or
    holders that hold each connection longer (its holders' slow work, lock_contention's to name)."""
    from tailscope.analysis.diagnosis.burst_waits import follows_arrivals
    from tailscope.analysis.diagnosis.queueing import dispersion, time_bins

    b, bins, _ = time_bins(ctx.frame.requests.arrival)
    arrivals = np.bincount(b, minlength=bins).astype(np.float64)
    r, _, _ = follows_arrivals(ctx, code, arrivals, b)
    return logistic(r, 0.5, 0.08) * logistic(dispersion(arrivals), 2.5, 0.5)


def _as_queue(fd: Finding, confidence: float, span: str, held: float, where: str) -> Finding:
    stats = {**fd.evidence["stats"], "server_queue_share": round(held, 3), "server_queue_from": where}
    if where == "a pool shared by every caller":
        why = ("; the waits end as calls of the callers on other instances give their connection back, "
               "not as their own instance's do: a pool shared by every caller outside their processes (a "
               "pooler such as PgBouncer in front of the peer, a proxy's upstream connections), a queue for "
               "its N server connections that grows with every caller's arrivals, not a lock in the caller")
    elif where == "untraced":
        why = (f"; {held:.0%} of the slow calls' extra time is the server's own, untraced time: calls "
               "waiting for the server's capacity (a scheduler's or batcher's queue, a worker pool), "
               "as a server's whole call shows it; a lock inside it is not ruled out")
    else:
        why = (f"; {held:.0%} of the slow calls' extra time is spent in '{span}', the server's own queue: "
               "calls waiting for the server's capacity, not for a lock")
    summary = fd.evidence["summary"].rstrip(".") + why + "."
    evidence = {**fd.evidence, "summary": summary, "stats": stats}
    return replace(fd, pattern=PATTERN, confidence=confidence, stage=fd.stage if where.startswith("a pool")
                   else "queue", span_name=span,
                   evidence=evidence, advice=ADVICE)
