"""queueing that a server reports as a number on its span, not as a span: the time a request waited in
its queue or scheduler before the server began to serve it.

Mechanism. Many servers measure the parts of a request's time themselves and put them on the request's
span as attributes instead of child spans: a model server's time in its scheduler's queue and its time to
the first token (vLLM), a batcher's queue and compute times, a database's wait and execution times, a
proxy's upstream times. The trace then shows one long span whose excess no child accounts for; the
number says where it went. A wait before service that carries the span's excess in the slow requests,
and is small in the others, is the server's queue: requests waited for the server's capacity (however
the queue formed: a burst, heavier work ahead, fewer replicas).

Reading, from the attributes' values and what their keys say in any convention (never a service's span
names): per span name of SERVER (or CONSUMER) spans inside requests, each numeric attribute whose key
says it is a time (a unit suffix: `_ms`, `_us`, `_ns`, `_s`, `_seconds`, ...; or a word: time, latency,
duration, wait, delay, elapsed) and not a setting (timeout, max, limit, ...), whose values vary, read in
its unit (by suffix; without one, seconds as OpenTelemetry's conventions have it, or the largest unit
that the span's own duration bounds) and bounded by the span's duration on >= 99 % of the spans: a
*component* of the span's time. A component whose key names a wait (queue, queued, wait, pending,
backlog, scheduler) and no lock or connection (a wait for a connection from a pool is lock_contention,
see ARCHITECTURE.md's vocabulary of waits) is a wait before service. Per request its value is summed;
`carried` = its tail-minus-body mean over the holding span's (how much of the span's excess it is),
`share` = its tail-excess share of the requests. A wait that grows with the request's own size (a
numeric attribute of the span that is not a time: tokens, bytes, rows; Spearman >= 0.5) is the
request's own work, not a wait for others: x (1 - logistic(r, 0.5, 0.1)).
Confidence = logistic(carried, 0.25, 0.06) x logistic(share, 0.3, 0.08) x that, at most 0.9.
"""

from __future__ import annotations

import re

import numpy as np

from tailscope.analysis.diagnosis.attributes import numeric_attributes
from tailscope.analysis.diagnosis.frame import KIND_SERVER, SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, ms, spearman
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "queueing"
MECHANISM = "a wait the server reports on its span"
KIND_CONSUMER = SPAN_KINDS.index("Consumer")
MIN_SPANS = 100
MIN_SHARE = 0.1  # of the tail excess, that a span name must carry for its attributes to be read
CAP = 0.9
UNITS = {  # a key's last word -> ns per unit
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1e9),
    **dict.fromkeys(("ms", "msec", "millis", "millisecond", "milliseconds"), 1e6),
    **dict.fromkeys(("us", "usec", "micros", "microsecond", "microseconds"), 1e3),
    **dict.fromkeys(("ns", "nanos", "nanosecond", "nanoseconds"), 1.0),
}
TIME_WORDS = frozenset({"time", "latency", "duration", "wait", "waiting", "waited", "delay", "elapsed",
                        "took"})
SETTING_WORDS = frozenset({"timeout", "max", "min", "limit", "budget", "deadline", "interval", "ttl",
                           "target", "configured", "threshold"})
WAIT_WORDS = frozenset({"queue", "queued", "queueing", "queuing", "enqueued", "wait", "waiting", "waited",
                        "pending", "backlog", "scheduler", "scheduling", "scheduled"})
HELD_WORDS = frozenset({"lock", "mutex", "pool", "conn", "connection", "connections", "checkout", "acquire",
                        "semaphore"})
SIZE_WORDS = re.compile(r"token|size|bytes|length|len|count|rows|items|chars|num|batch", re.IGNORECASE)
ADVICE = (
    "The server itself reports that requests waited in its queue before it served them, and that wait is "
    "the slow requests' extra time: the server's capacity was short for the work that came (a burst, "
    "heavier requests ahead, a replica out). Scale on the reported queue time or depth rather than "
    "utilisation, keep spare capacity for known peaks, bound the queue and shed or degrade beyond it, and "
    "look at what made the work ahead long (long inputs, preemptions, one replica carrying the load)."
)


def words(key: str) -> list[str]:
    """A key's words: split at dots, underscores, dashes and camelCase, lower case."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[._\-\s/]+", spaced.lower()) if w]


def unit_of(key: str) -> float | None:
    """ns per unit where the key says its unit by its last word (`queue_ms`, `wait.us`), else None."""
    parts = words(key)
    return UNITS.get(parts[-1]) if parts else None


def is_time(key: str) -> bool:
    parts = words(key)
    return bool(parts) and not SETTING_WORDS & set(parts) and (
        unit_of(key) is not None or bool(TIME_WORDS & set(parts)))


def is_wait(key: str) -> bool:
    parts = set(words(key))
    return bool(WAIT_WORDS & parts) and not HELD_WORDS & parts


def components(ctx: Context, code: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{key: (span indices, ns)} for the time attributes of a span name that are parts of its spans'
    time: in the key's unit (by suffix; else seconds, or the largest unit the span bounds), <= the span's
    duration on >= 99 % of the spans that carry it, varying (>= 10 distinct values)."""
    f = ctx.frame
    out = {}
    for key, (idx, values) in numeric_attributes(f, code, MIN_SPANS).items():
        if not is_time(key) or len(np.unique(values[:5000])) < 10 or values.min() < 0:
            continue
        idx = np.asarray(idx, np.int64)
        bound = f.dur[idx].astype(np.float64) * 1.02 + 1e5
        given = unit_of(key)
        for mult in (given,) if given is not None else (1e9, 1e6, 1e3, 1.0):
            if (values * mult <= bound).mean() >= 0.99:
                out[key] = (idx, values * mult)
                break
    return out


def _own_size(ctx: Context, code: int, idx: np.ndarray, wait: np.ndarray) -> tuple[float, str | None]:
    """The largest Spearman of the wait with a size of the span's own request (a numeric attribute of
    the span that is not a time and names a size or count), and that attribute."""
    best, name = 0.0, None
    for key, (sidx, values) in numeric_attributes(ctx.frame, code, MIN_SPANS).items():
        if is_time(key) or not SIZE_WORDS.search(key) or len(np.unique(values[:5000])) < 10:
            continue
        common, at_w, at_s = np.intersect1d(idx, np.asarray(sidx, np.int64), return_indices=True)
        if len(common) < MIN_SPANS:
            continue
        r = spearman(values[at_s].astype(np.float64), wait[at_w])
        if r > best:
            best, name = r, key
    return best, name


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    if len(reqs) < MIN_SPANS or ctx.split.excess_ns <= 0:
        return []
    served = ((f.kind == KIND_SERVER) | (f.kind == KIND_CONSUMER)) & (f.request >= 0)
    codes, counts = np.unique(f.name[served], return_counts=True)
    best = None
    for code in codes[counts >= MIN_SPANS].tolist():
        spans = served & (f.name == code)
        held = ctx.per_request(spans, f.dur.astype(np.float64))
        span_excess = ctx.split.mean(held, ctx.split.tail) - ctx.split.mean(held, ctx.split.body)
        if span_excess <= MIN_SHARE * ctx.split.excess_ns:  # a wait inside it could carry little: unread
            continue
        for key, (idx, ns) in components(ctx, code).items():
            if not is_wait(key):
                continue
            keep = f.request[idx] >= 0
            per = np.bincount(f.request[idx][keep], weights=ns[keep], minlength=len(reqs))
            extra = ctx.split.mean(per, ctx.split.tail) - ctx.split.mean(per, ctx.split.body)
            carried = float(extra / span_excess)
            share = excess_share(per, ctx.split)
            r_size, size_key = _own_size(ctx, code, idx, ns)
            strength = logistic(carried, 0.25, 0.06) * (1 - logistic(r_size, 0.5, 0.1))
            confidence = min(CAP, strength * logistic(share, 0.3, 0.08))
            if best is None or confidence > best[0]:
                best = (confidence, code, key, idx, ns, per, carried, share, r_size, size_key)
    if best is None or best[0] < 0.05:
        return []
    confidence, code, key, idx, ns, per, carried, share, r_size, size_key = best
    name = f.names[code]
    service = main_service(f, idx)
    body = float(ctx.split.mean(per, ctx.split.body))
    tail = float(ctx.split.mean(per, ctx.split.tail))
    stats = {
        "services": [service], "instances": busiest(f, f.instance[idx], ns), "attribute": key,
        "mechanism": MECHANISM, "wait_body_ms": ms(body), "wait_tail_ms": ms(tail),
        "wait_p50_ms": ms(float(np.median(ns))), "wait_p99_ms": ms(float(np.quantile(ns, 0.99))),
        "span_excess_carried": round(carried, 3), "tail_excess_share": round(share, 3),
        "own_size_spearman": round(r_size, 3), "own_size_attribute": size_key,
    }
    summary = (
        f"{service} reports on '{name}' how long each request waited before it was served ('{key}'): "
        f"{ms(tail):.0f} ms in the slowest requests vs {ms(body):.0f} ms in the others, {carried:.0%} of "
        f"the span's extra time there and {share:.0%} of the tail excess: the requests queued at the server."
        + (f" The wait grows with the request's own '{size_key}' (Spearman {r_size:.2f}): partly its own "
           "work, not a queue." if r_size >= 0.4 else "")
    )
    return [Finding(PATTERN, clamp01(confidence), "queue", name, {"summary": summary, "stats": stats},
                    ADVICE)]


def _forward_queued(fd: Finding, queue: Finding) -> None:
    """compute_bound read from a server span's untraced time, where the server reports that most (>= half)
    of the span's extra time was its wait (`span_excess_carried`) and the wait carries at least half of
    what the forward claims: the requests queued for the model, it did not compute longer; part of the
    queue, ranked below it."""
    stats, own = queue.evidence["stats"], fd.evidence.setdefault("stats", {})
    if stats.get("span_excess_carried", 0.0) < 0.5 or \
            stats["tail_excess_share"] < 0.5 * (own.get("tail_excess_share") or 0.0):
        return
    fd.confidence = min(fd.confidence, 0.9 * queue.confidence)
    own["part_of"] = PATTERN
    fd.evidence["summary"] += (
        f" The server reports that {stats['span_excess_carried']:.0%} of the span's extra time was its "
        f"wait ('{stats['attribute']}'): the requests queued for the model (part of queueing).")


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """slow_dependency on a call whose callee's SERVER spans (mostly) are the ones that report the
    named wait (>= 0.5), where that wait carries at least half of what the call's finding claims: the
    callee was not slow at its work, its requests queued; a possible cause beside the queue at most.
    compute_bound on the reporting span itself: see _forward_queued."""
    f = ctx.frame
    for queue in findings:
        stats = queue.evidence.get("stats", {})
        if queue.pattern != PATTERN or stats.get("mechanism") != MECHANISM or queue.confidence < 0.5:
            continue
        server = f.names.index(queue.span_name)
        for fd in findings:
            own = fd.evidence.get("stats", {})
            if fd.pattern == "compute_bound" and fd.span_name == queue.span_name:
                _forward_queued(fd, queue)
                continue
            if fd.pattern != "slow_dependency" or fd.span_name not in f.names or fd.confidence < 0.45:
                continue
            code = f.names.index(fd.span_name)
            kids = np.nonzero((f.parent >= 0) & (f.name[np.maximum(f.parent, 0)] == code))[0]
            calls = int(((f.name == code) & (f.request >= 0)).sum())
            if (f.name[kids] == server).sum() < 0.5 * max(calls, 1):
                continue
            if stats["tail_excess_share"] < 0.5 * (own.get("tail_excess_share") or 0.0):
                continue
            fd.confidence = min(fd.confidence, 0.45)
            own["part_of"] = PATTERN
            fd.evidence["summary"] += (
                f" Its callee reports that the calls waited in its queue ('{stats['attribute']}' on "
                f"'{queue.span_name}'): the time is that queue's (part of it), not slower work.")
    return findings
