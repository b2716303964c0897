"""queueing: waiting before work starts that tracks the arrival rate with a lag and drains after.

Statistic. A request's wait is the exclusive time of its queue-stage spans plus the request root's own
unattributed time (and that of a span wrapping the request's work, a handler under the root): before
its first child (work not yet started), or between children (a batch queue or a worker pool with no
span of its own shows only as such a hole), and, where a front proxy's `X-Request-Start` stamp is
recorded and the proxy is not traced, the time from it to the root's start (request_start.py). Time
is cut into ~100 bins; per bin
we take the arrival count and the mean wait of the requests arriving in it, then the correlation of
arrivals with wait at lags 0..10 bins (the queue fills while arrivals exceed capacity and drains
after, so wait lags arrivals). Arrivals must really vary (index of dispersion of the per-bin counts
well above the Poisson value 1), and the wait must carry the tail. Where a unit of work carries several
messages (a batch consumer's, units.py), the arrivals are the messages' (their publish times): a
backlogged consumer takes fuller batches, not more of them.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import held_arrivals
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.request_start import header_arrivals
from tailscope.analysis.diagnosis.stats import (
    clamp01,
    excess_share,
    lagged_correlation,
    logistic,
    ms,
    spearman,
    tail_split,
)

PATTERN = "queueing"
ADVICE = (
    "Requests wait in a queue when arrivals outrun capacity and the queue drains only after the burst. "
    "Scale on queue depth or wait time rather than CPU/GPU utilisation (autoscaling trigger), keep warm "
    "spare capacity (pre-warming) for known bursts, bound the queue and shed or degrade load beyond it, "
    "and alert on queue depth. A faster model shortens the drain but does not remove the queue. (A wait "
    "for a worker thread, an executor or a server slot to start the work is a queue; a wait for a "
    "connection from a bounded pool is named lock_contention.)"
)
OVERLOAD_ADVICE = (
    "Arrivals exceed what the service can serve, so the queue grows for as long as the load lasts: add "
    "capacity (more replicas or workers, a faster model: see the forward pass), raise throughput per "
    "call (larger batches), and bound the queue with admission control or load shedding so latency "
    "stays within the target; alert on queue depth and autoscale on it."
)
BINS = 100
MAX_LAG = 10


def waits(ctx: Context) -> np.ndarray:
    """Per request: exclusive time of queue-stage spans + the root's exclusive time, where the root has
    children (a childless root's own time is its work, not a wait)."""
    f = ctx.frame
    reqs = f.requests
    queue = ctx.span_stage_mask("queue")
    wait = ctx.per_request(queue & (f.request >= 0))
    roots = reqs.root
    has_children = ~f.leaf[roots] & ~queue[roots]  # a queue-stage root is counted above
    wait = wait + np.where(has_children, f.excl[roots], 0).astype(np.float64)
    # a span that wraps the request's work (a handler under the root) holds the same kind of wait
    wrap = f.wrappers[~queue[f.wrappers]]
    return wait + np.bincount(f.request[wrap], weights=f.excl[wrap].astype(np.float64), minlength=len(reqs))


def time_bins(arrival: np.ndarray) -> tuple[np.ndarray, int, float]:
    """Each request's bin of the run's time (~100 bins, at least 20 requests a bin on average), the
    number of bins and their width (ns)."""
    bins = int(min(BINS, max(20, len(arrival) // 20)))
    width = (int(arrival.max() - arrival.min()) + 1) / bins
    return np.minimum(((arrival - arrival.min()) / width).astype(np.int64), bins - 1), bins, width


def dispersion(arrivals: np.ndarray) -> float:
    """Index of dispersion of per-bin arrival counts (the first and last bins, partial, left out):
    about 1 for a Poisson load, well above it where arrivals come in bursts."""
    core = arrivals[1:-1]
    return float(core.var() / core.mean()) if core.mean() > 0 else 0.0


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    n = len(reqs)
    if n < 100:
        return []
    w = waits(ctx)
    arrival = reqs.arrival
    split, before = ctx.split, np.zeros(n)
    proxy = header_arrivals(f)  # a front proxy's stamp where it is not traced: the wait for a worker
    if proxy is not None:
        stamped = np.isfinite(proxy) & (reqs.client_span < 0)
        before = np.where(stamped, np.maximum(reqs.start - np.nan_to_num(proxy), 0), 0)
        w = w + before
        arrival = np.where(stamped, np.minimum(np.nan_to_num(proxy), reqs.start), arrival).astype(np.int64)
        if stamped.mean() >= 0.5:  # the tail as the proxy sees it: the wait is part of the latency
            split = tail_split(reqs.latency + before, reqs.weight)
    share = excess_share(w, split)
    arrival = held_arrivals.spread(ctx, arrival)  # a stopped sender's held requests, let go at once
    span_ns = int(arrival.max() - arrival.min()) + 1
    b, bins, width = time_bins(arrival)
    units = np.bincount(b, minlength=bins).astype(np.float64)
    wait_sum = np.bincount(b, weights=w, minlength=bins)
    mean_wait = np.where(units > 0, wait_sum / np.maximum(units, 1), 0.0)
    arrivals = units
    if reqs.work_arrival is not None:  # units that carry several messages (a batch): the messages arrive
        at = np.clip(((reqs.work_arrival - arrival.min()) / width).astype(np.int64), 0, bins - 1)
        arrivals = np.bincount(at, minlength=bins).astype(np.float64)
    # the first and last bins are partial; leave them out of the statistics
    core = slice(1, bins - 1)
    a, mw = arrivals[core], mean_wait[core]
    spread = dispersion(arrivals)
    lag, r, rs = lagged_correlation(a, mw, MAX_LAG)
    r0 = float(rs[0])
    # sustained overload: no burst to follow, the queue just grows for the whole run
    trend = spearman(arrival.astype(np.float64), w)
    if max(r, trend) <= 0.1 or share <= 0.05:
        return []
    strength = max(logistic(r, 0.5, 0.08) * logistic(spread, 2.5, 0.5), logistic(trend, 0.6, 0.08))
    overloaded = logistic(trend, 0.6, 0.08) > logistic(r, 0.5, 0.08) * logistic(spread, 2.5, 0.5)
    ends = reqs.start + reqs.latency
    served_rps = n / max((ends.max() - ends.min()) / 1e9, 1e-9)
    offered_rps = n / max(span_ns / 1e9, 1e-9)
    weight = logistic(share, 0.3, 0.08)
    confidence = strength * weight
    ctx.notes["queueing_strength"] = strength  # burst_waits.py: the test, apart from the wait's share
    ctx.notes["queueing_confidence"] = confidence  # compute_bound: a wait that follows arrivals is not its
    peak = int(np.argmax(a)) + 1
    after = mean_wait[peak : peak + 2 * MAX_LAG]
    drains = bool(len(after) > 2 and after[-1] < after.max() * 0.5)
    stats = {
        "lag_ms": ms(lag * width),
        "lag_bins": lag,
        "correlation": round(r, 3),
        "correlation_lag0": round(r0, 3),
        "arrival_dispersion": round(spread, 2),
        "bin_ms": ms(width),
        "peak_arrival_rate_rps": round(float(a.max()) / (width / 1e9), 1),
        "mean_arrival_rate_rps": round(float(a.mean()) / (width / 1e9), 1),
        "wait_p50_ms": ms(np.median(w)),
        "wait_p99_ms": ms(np.quantile(w, 0.99)),
        "tail_excess_share": round(share, 3),
        "drains_after_peak": drains,
        "wait_trend_spearman": round(trend, 3),
        "sustained_overload": bool(overloaded),
        "offered_rps": round(offered_rps, 2),
        "served_rps": round(served_rps, 2),
    }
    summary = (
        f"Wait before work starts follows the arrival rate (r={r:.2f} at a lag of {ms(lag * width):.0f} ms; "
        f"arrivals peak at {stats['peak_arrival_rate_rps']} rps vs {stats['mean_arrival_rate_rps']} rps on "
        f"average, dispersion {spread:.1f}); wait p50 {stats['wait_p50_ms']} ms, p99 "
        f"{stats['wait_p99_ms']} ms; it carries {share:.0%} of the tail excess"
        + ("; the queue drains after the peak." if drains else ".")
    )
    if overloaded:
        summary = (
            f"The queue never drains: wait before work grows through the whole run (Spearman {trend:.2f} "
            f"with arrival time), from p50 {stats['wait_p50_ms']} ms to p99 {stats['wait_p99_ms']} ms; "
            f"requests arrive at {offered_rps:.1f}/s and are served at {served_rps:.1f}/s (sustained "
            f"overload); the wait carries {share:.0%} of the tail excess."
        )
    chart = {
        "kind": "arrival_vs_wait",
        "time_s": (np.arange(bins) * width / 1e9).round(3).tolist(),
        "arrival_rps": (arrivals / (width / 1e9)).round(2).tolist(),
        "mean_wait_ms": (mean_wait / 1e6).round(3).tolist(),
        "lag_ms": ms(lag * width),
    }
    names = np.unique(f.name[ctx.span_stage_mask("queue")])
    span_name = f.names[int(names[0])] if len(names) == 1 else None
    if excess_share(before, split) >= 0.5 * share:  # mostly before the handler: the root's queue
        span_name = f.names[int(np.bincount(f.name[reqs.root]).argmax())]
        stats["wait_before_handler_from"] = "X-Request-Start"
        stats["tail_of"] = "latency from the front proxy's X-Request-Start stamp"
    return [
        Finding(
            PATTERN,
            clamp01(confidence),
            "queue",
            span_name,
            {"summary": summary, "stats": stats, "chart": chart},
            OVERLOAD_ADVICE if overloaded else ADVICE,
        )
    ]
