"""The levers: what a fix changes in a run's spans, as an `Edit` (retime.py) plus whether the
queue in front of the model is replayed afterwards (served.py, replay.py). Each builder takes the
run's `Inputs` and returns a `Lever`, or None where the run has nothing it could change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.whatif.batches import Batches
from tailscope.analysis.whatif.handlers import Handlers, accepted_late_tops, merged_stalls
from tailscope.analysis.whatif.retime import Edit, Layout
from tailscope.analysis.whatif.served import Served

SOFTWARE, HARDWARE, CAPACITY = "software", "hardware", "capacity"


@dataclass
class Inputs:
    frame: TraceFrame
    lay: Layout
    stage: np.ndarray  # per span, as the diagnosis infers it
    served: Served | None
    findings: list[dict[str, Any]]
    seed: int = 0
    stalls: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (instance, start, end) of pauses
    throttle_stalls: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # those on a quota period
    handlers: Handlers | None = None  # the queues before handler threads (handlers.py)
    batches: Batches | None = None  # a batch consumer's messages and processes (batches.py)
    attempts: Any = None  # calls cut at their deadline and made again (attempts.py)
    capped: Any = None  # the calls of deadline-capped names (deadlines.py)

    def rng(self, salt: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, salt])

    def spans_named(self, name: str | None, in_requests: bool = True) -> np.ndarray:
        """The spans of a name inside requests; `in_requests` False: where no span of the name is
        inside a request, all of them (a caller that only forwards is no request root of its own:
        its calls are the requests' client wrappers, on the client-observed path)."""
        f = self.frame
        if name is None or name not in f.names:
            return np.zeros(0, np.int64)
        named = f.name == f.names.index(name)
        inside = np.nonzero(named & (f.request >= 0))[0]
        return inside if in_requests or len(inside) else np.nonzero(named)[0]


@dataclass
class Lever:
    key: str  # stable id: "no_gc_stalls", "cache_hits:feature_hydration", "forward_x0.5", ...
    label: str  # what the fix is, for people
    kind: str  # software | hardware | capacity
    model: str  # how it is modelled, one sentence
    edit: Edit
    pattern: str | None = None  # the finding it answers
    span_name: str | None = None
    requeue: bool = False  # replay the queue in front of the model afterwards
    scale: float = 1.0  # forward service time factor in the replay
    window_ns: float | None = None  # the batching window in the replay (None: the run's)
    extra_servers: int = 0
    arrival_shift: np.ndarray | None = None  # per request: how much earlier it reaches the queue (ns)
    handler_shift: np.ndarray | None = None  # per handler call: how much earlier it arrives (ns)
    extra_slots: int = 0  # more handler threads per instance
    handler_pools: np.ndarray | None = None  # per handler call: the pool it queues at (else its own)
    handlers_set: bool = False  # the edit sets the waits for handler threads itself: not replayed
    params: dict[str, float] = field(default_factory=dict)


def _draw(rng: np.random.Generator, pool: np.ndarray, k: int) -> np.ndarray:
    return pool[rng.integers(0, len(pool), k)].astype(np.float64)


# ---- stalls (GC pauses, process freezes) -------------------------------------------------------


def stall_overlap(stalls, inst: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per interval [s, e) on instance `inst`: how long the stalls of that instance cover it (ns).
    Per instance, the stall time before t is piecewise linear in t: one interpolation each end."""
    si, ss, se = merged_stalls(*stalls)
    out = np.zeros(len(s))
    if len(si) == 0 or len(s) == 0:
        return out
    for i in np.unique(si).tolist():
        rows = np.nonzero(inst == i)[0]
        if len(rows) == 0:
            continue
        a, b = ss[si == i].astype(np.float64), se[si == i].astype(np.float64)
        before = np.r_[0.0, np.cumsum(b - a)[:-1]]
        xp = np.column_stack((a, b)).ravel()
        fp = np.column_stack((before, before + (b - a))).ravel()
        out[rows] = np.interp(e[rows], xp, fp) - np.interp(s[rows], xp, fp)
    return np.maximum(out, 0.0)


def stall_edit(x: Inputs, stalls) -> Edit:
    """Every span in flight on a stalled instance loses the stall: leaves the stall time inside them,
    parents the stall time inside their own gaps and trailing time, and a child the stall time in the
    gap before it (a call sent during the stall waited to be accepted)."""
    f, lay = x.frame, x.lay
    edit = Edit.none(len(f))
    start = f.start.astype(np.int64)
    leaf = ~lay.has_children
    end = start + f.dur
    edit.cut_after[leaf] = stall_overlap(stalls, f.instance[leaf], start[leaf], end[leaf])
    par = np.nonzero(lay.has_children)[0]
    edit.cut_after[par] = stall_overlap(stalls, f.instance[par], end[par] - lay.trailing[par], end[par])
    kid = np.nonzero(lay.parent >= 0)[0]
    k_start = start[lay.parent[kid]] + lay.rel_start[kid]
    edit.cut_before[kid] = stall_overlap(stalls, f.instance[kid], k_start - lay.gap[kid], k_start)
    return edit


def no_stalls(x: Inputs) -> Lever | None:
    if x.stalls is None or len(x.stalls[0]) == 0:
        return None
    total = float((x.stalls[2] - x.stalls[1]).sum()) / 1e6
    return Lever(
        "no_gc_stalls",
        "No GC pauses or process stalls",
        SOFTWARE,
        "every span in flight on a paused instance loses the pause (and so does a caller waiting for it);"
        " the queue before the model is replayed with the arrivals and service times that gives",
        stall_edit(x, x.stalls),
        pattern="gc_pause",
        requeue=True,
        params={"stall_ms": round(total, 1)},
        arrival_shift=accepted_late(x, x.stalls),
        handler_shift=(
            None if x.handlers is None else accepted_late_tops(x.frame, x.stalls, x.handlers.client)
        ),
    )


ACCEPT_TOLERANCE_NS = 500_000


def accepted_late(x: Inputs, stalls) -> np.ndarray:
    """Per request: how much earlier it would have started without the stalls. A request with no
    client span that starts as a stall ends arrived during it and was accepted late, with the others
    that arrived meanwhile; they are spread evenly over the stall (Poisson arrivals), in their order."""
    reqs = x.frame.requests
    shift = np.zeros(len(reqs))
    alone = np.nonzero(reqs.client_span < 0)[0]
    if len(alone) == 0:
        return shift
    si, ss, se = merged_stalls(*stalls)
    stride = int(max(se.max(initial=0), reqs.start.max(initial=0))) + 1
    key = si * stride + se
    inst, t = reqs.root_instance[alone], reqs.start[alone].astype(np.int64)
    k = np.searchsorted(key, inst * stride + t + ACCEPT_TOLERANCE_NS, side="right") - 1
    ok = k >= 0
    kk = np.maximum(k, 0)
    late = ok & (si[kk] == inst) & (np.abs(t - se[kk]) <= ACCEPT_TOLERANCE_NS)
    rows, stall = alone[late], kk[late]
    order = np.lexsort((reqs.start[rows], stall))
    rows, stall = rows[order], stall[order]
    first = np.r_[True, stall[1:] != stall[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))
    counts = np.bincount(stall, minlength=len(si))[stall]
    j = np.arange(len(rows)) - group_start
    new = ss[stall] + (j + 0.5) / counts * (se[stall] - ss[stall])
    shift[rows] = reqs.start[rows] - new
    return shift


# ---- caches -------------------------------------------------------------------------------------


def cache_hits(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    f = x.frame
    edit = Edit.none(len(f))
    stats = finding.get("evidence", {}).get("stats", {})
    name = finding.get("span_name")
    fallback = stats.get("fallback_span")
    if fallback:  # the fallback call disappears; its lookup stays as it is
        spans = x.spans_named(fallback)
        if len(spans) == 0:
            return None
        edit.dur[spans] = 0.0
        edit.cut_before[spans] = x.lay.gap[spans]
        model = f"'{fallback}' (the miss path) is no longer called"
        name = fallback
    else:
        spans = x.spans_named(name)
        chart = finding.get("evidence", {}).get("chart") or {}
        threshold = chart.get("threshold_ms")
        if threshold is None and len(spans):
            threshold = miss_threshold_ms(f.dur[spans]) or _flushed_threshold(f.dur[spans], f.start[spans])
        if len(spans) == 0:
            return None
        if threshold is None:  # no hit and miss modes of their own: a wave of misses in time
            wave = miss_wave(f.start[spans], f.dur[spans])
            if wave is None:
                return None
            edit.dur[spans[wave]] = _draw(x.rng(2), f.dur[spans[~wave]], int(wave.sum()))
            model = (f"each '{name}' in the stretch of the run where it was slow (the cache emptied at "
                     "once: a flush, a wave of expiries) takes the time of one outside it (drawn)")
        else:
            d = f.dur[spans]
            miss = d >= float(threshold) * 1e6
            hits = d[~miss]
            if not miss.any() or len(hits) == 0:
                return None
            model = f"each miss of '{name}' takes the time of a hit drawn from the run's hits"
            kept = _base_misses(x, stats, miss, f.start[spans])
            early = miss & (f.start[spans] <= np.quantile(f.start[spans], EARLY_SHARE))
            if kept.any() and early.sum() >= 5:  # as the misses before the surge took
                edit.dur[spans[kept]] = _draw(x.rng(36), d[early], int(kept.sum()))
                model += " (as many misses kept as the run's early miss rate, as slow as its early misses)"
            miss &= ~kept
            edit.dur[spans[miss]] = _draw(x.rng(2), hits, int(miss.sum()))
    return Lever(
        f"cache_hits:{name}",
        f"Cache hits instead of misses ('{name}')",
        SOFTWARE,
        model,
        edit,
        pattern="cache_miss",
        span_name=name,
        requeue=True,
    )


FLUSHED_MOST = 0.8  # a flushed cache's misses as most of its lookups, where no threshold is given
SURGE = 1.3  # misses surged mid-run where the late miss rate is this many times the early one
EARLY_SHARE = 0.2  # the run's first fifth: the misses before the surge


def _flushed_threshold(dur: np.ndarray, start: np.ndarray) -> float | None:
    """A flushed cache's hit and miss modes (ms between them) where the misses are most of the lookups
    (up to FLUSHED_MOST), only where they rose mid-run by SURGE over the run's first fifth (a flush:
    the slower mode of a steady mix is the work, not misses)."""
    threshold = miss_threshold_ms(dur, FLUSHED_MOST)
    if threshold is None or len(dur) < 50:
        return None
    miss, first = dur >= threshold * 1e6, start <= np.quantile(start, EARLY_SHARE)
    return threshold if miss[~first].mean() >= SURGE * miss[first].mean() else None


def _base_misses(x: Inputs, stats: dict[str, Any], miss: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Where the misses surged mid-run (evictions, a wave of expiries, a flush: the late miss rate over
    SURGE times the early one: the finding's, else the lookups' own, `start` their times), the misses
    the cache had before the surge stay misses: each miss kept with probability early rate / the run's
    rate (drawn). Else none kept (a cache that missed as often from the start: every miss a hit)."""
    early, late = stats.get("early_miss_rate"), stats.get("late_miss_rate")
    if (early is None or late is None) and len(miss) >= 50:
        first = start <= np.quantile(start, EARLY_SHARE)
        early, late = float(miss[first].mean()), float(miss[~first].mean())
    rate = float(miss.mean())
    if early is None or late is None or not late >= SURGE * early or rate <= 0:
        return np.zeros(len(miss), bool)
    return miss & (x.rng(35).random(len(miss)) < min(float(early) / rate, 1.0))


def miss_threshold_ms(dur: np.ndarray, most: float = 0.6) -> float | None:
    """Where a cache finding gives no threshold (a chart without one: a finding given by hand, from
    another tool): the duration (ms) between the lookup's two modes, hits and misses, as the
    diagnosis splits them (a two-component mixture of the log durations); None where the durations
    show no second mode a multiple of the first."""
    from tailscope.analysis.diagnosis.stats import gmm2

    x = np.log(np.maximum(dur.astype(np.float64), 1.0))
    mix = gmm2(x)
    if mix is None or mix.mu[1] - mix.mu[0] < np.log(2.0) or not 0.005 <= mix.w[1] <= most:
        return None
    return float(np.exp(mix.threshold)) / 1e6


WAVE_BINS = 20  # the run cut into this many stretches of equal time
WAVE_RATIO = 1.5  # a stretch whose mean lookup time is this many times the median stretch's


def miss_wave(start: np.ndarray, dur: np.ndarray) -> np.ndarray | None:
    """The lookups in the stretches of the run where they were slow (a cache emptied at once: the
    hot set expiring together, a flush; misses fall as it refills): per twentieth of the run, the
    mean lookup time against the median twentieth's; a stretch 1.5 times it is in the wave. None where
    no stretch is, or most are (no calm part to draw from)."""
    if len(start) < 5 * WAVE_BINS:
        return None
    t = start.astype(np.float64)
    edges = np.linspace(t.min(), t.max() + 1, WAVE_BINS + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, WAVE_BINS - 1)
    count = np.bincount(b, minlength=WAVE_BINS)
    mean = np.bincount(b, weights=dur.astype(np.float64), minlength=WAVE_BINS) / np.maximum(count, 1)
    slow = (count > 0) & (mean > WAVE_RATIO * float(np.median(mean[count > 0])))
    if not slow.any() or slow.sum() > WAVE_BINS // 2:
        return None
    return slow[b]


# ---- locks --------------------------------------------------------------------------------------


# ---- dependencies (the network: network_levers.py) -----------------------------------------------


def _top_calls(x: Inputs, name: str | None) -> np.ndarray:
    spans = x.spans_named(name, in_requests=False)
    p = x.frame.parent[spans]
    nested = (p >= 0) & (x.frame.name[np.maximum(p, 0)] == x.frame.name[spans])
    return spans[~nested]


def dependency_p50(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    name = finding.get("span_name")
    spans = _top_calls(x, name)
    if len(spans) == 0:
        return None
    edit = Edit.none(len(x.frame))
    d = x.frame.dur[spans]
    p50 = float(np.median(d))
    edit.dur[spans] = p50
    model = "every call takes the dependency's own median"
    slow = slow_mode(d)
    if slow is not None:  # the median is no healthy call: the slow mode's calls take the fast one's
        p50 = float(np.median(d[~slow]))
        edit.dur[spans] = np.nan
        edit.dur[spans[slow]] = _draw(x.rng(4), d[~slow], int(slow.sum()))
        model = ("a third or more of the calls are in a slower mode (a backend behind the balancer got "
                 "slow): each takes the time of a call of the fast mode (drawn from the run)")
    elif (subset := slow_subset(d)) is not None:  # the median is healthy: only the subset moves
        edit.dur[spans] = np.nan
        edit.dur[spans[subset]] = _draw(x.rng(4), d[~subset], int(subset.sum()))
        model = (f"a slow subset of the calls ({subset.mean():.1%}: one tenant, one plan) takes the time "
                 "of a call of the faster mode (drawn from the run); the others keep theirs (their tail is "
                 "the dependency's own)")
    return Lever(
        f"dependency_p50:{name}",
        f"'{name}' always at its p50 ({p50 / 1e6:.1f} ms)",
        SOFTWARE,
        model,
        edit,
        pattern="slow_dependency",
        span_name=name,
        params={"p50_ms": round(p50 / 1e6, 3)},
    )


SLOW_MODE_SHARE = 0.3  # a slower mode holding this share of the calls or more: the p50 is not healthy


def slow_mode(dur: np.ndarray) -> np.ndarray | None:
    """Per call, whether it is in the slower of two modes of the calls' times (the split a cache's
    hits and misses get: miss_threshold_ms), where that mode holds SLOW_MODE_SHARE of the calls or
    more; None where it holds fewer or there is no second mode."""
    threshold = miss_threshold_ms(dur)
    if threshold is None:
        return None
    slow = dur >= threshold * 1e6
    return slow if slow.mean() >= SLOW_MODE_SHARE and (~slow).any() else None


def slow_subset(dur: np.ndarray) -> np.ndarray | None:
    """Per call, whether it is in a slower mode (miss_threshold_ms's split) holding under
    SLOW_MODE_SHARE of the calls and at least 20 of them; None where there is none."""
    threshold = miss_threshold_ms(dur)
    if threshold is None:
        return None
    slow = dur >= threshold * 1e6
    return slow if slow.sum() >= 20 and slow.mean() < SLOW_MODE_SHARE else None


def dependency_deadline(x: Inputs, finding: dict[str, Any], deadline_ms: float | None = None) -> Lever | None:
    name = finding.get("span_name")
    spans = _top_calls(x, name)
    if len(spans) == 0:
        return None
    d = x.frame.dur[spans].astype(np.float64)
    limit = deadline_ms * 1e6 if deadline_ms else float(np.quantile(d, 0.95))
    edit = Edit.none(len(x.frame))
    edit.dur[spans] = np.minimum(d, limit)
    return Lever(
        f"dependency_deadline:{name}",
        f"'{name}' behind a {limit / 1e6:.1f} ms deadline",
        SOFTWARE,
        "a call past the deadline is abandoned and answered by a fallback that costs nothing "
        "(default deadline: the call's own p95)",
        edit,
        pattern="slow_dependency",
        span_name=name,
        params={"deadline_ms": round(limit / 1e6, 3)},
    )


