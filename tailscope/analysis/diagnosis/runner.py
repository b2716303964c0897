"""Run every detector on one run and return its findings: the named causes ranked by their share of the
tail excess, then the possible ones, then where the rest of a material tail goes (see shares.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis import (
    batch_timer,
    burst_waits,
    cache_miss,
    calibration,
    callee_queue,
    callee_waits,
    client_leg,
    cold_after_change,
    cold_peers,
    cold_start,
    compute_bound,
    conn_setup,
    dependency_tail,
    fallback_path,
    first_calls,
    gc_pause,
    gc_straggler,
    head_of_line,
    held_slots,
    key_serial,
    large_payload,
    lock_contention,
    miss_wave,
    network,
    new_kinds,
    payload_holders,
    pool_checkout,
    proxy_stalls,
    queueing,
    quota_stalls,
    released_calls,
    reported_waits,
    retransmits,
    sample,
    shares,
    slow_dependency,
    splits,
    starved_executor,
    timeout_retry,
    transaction_waits,
    unexplained,
    unit_merge,
    where,
)
from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.diagnosis.model import NAMED, Context, Finding
from tailscope.analysis.diagnosis.stats import MATERIAL_SHARE as MATERIAL
from tailscope.analysis.diagnosis.stats import weighted_quantile

# Order matters only for notes: gc_pause (and proxy_stalls for a forwarding tier) leave their stall
# episodes for cache_miss, network and compute_bound; timeout_retry and large_payload mark the calls
# whose tail they explain before slow_dependency reads them; cache_miss marks bimodal names before
# cold_start and fallback_path read them; lock_contention and head_of_line mark the calls that wait
# for a connection before slow_dependency reads them.
DETECTORS = (
    gc_pause,
    gc_straggler,
    proxy_stalls,
    quota_stalls,
    released_calls,
    timeout_retry,
    large_payload,
    cache_miss,
    miss_wave,
    fallback_path,
    cold_start,
    lock_contention,
    key_serial,
    pool_checkout,
    transaction_waits,
    head_of_line,
    queueing,
    reported_waits,
    starved_executor,
    batch_timer,
    callee_queue,
    slow_dependency,
    network,
    retransmits,
    conn_setup,
    compute_bound,
)
MIN_CONFIDENCE = 0.05
COLD_PEER, CALLEE_QUEUE = cold_peers.MECHANISM, callee_queue.MECHANISM
COLD_DATA = cold_after_change.MECHANISM
READ_SHARE = 0.4  # the read's part of a diagnosis' time, for progress bars


@dataclass
class Diagnosis:
    run: str
    requests: int
    spans: int
    findings: list[Finding]
    seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    tail: dict[str, float] = field(default_factory=dict)  # the latency tail the shares are of
    sampling: dict[str, Any] = field(default_factory=dict)  # a sampled read: what was read, its error
    # a run of several kinds of units of work (units.py): each kind's entry point, units and tail
    populations: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self, with_chart: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run,
            "requests": self.requests,
            "findings": [fd.to_dict(with_chart) for fd in self.findings],
        }
        if self.tail:
            out["tail"] = self.tail
        if self.sampling:
            out["sampling"] = self.sampling
        if self.populations:
            out["populations"] = self.populations
        if self.reason:
            out["reason"] = self.reason
        if self.errors:
            out["errors"] = self.errors
        return out


def arbitrate(findings: list[Finding]) -> list[Finding]:
    """Settle causes that explain each other. A cache whose misses pile up in the first requests of
    each instance, in a run with a clear cold start, is part of that cold start (restarts empty the
    cache): it stays a finding, ranked below the cold start. A call made only on a cache's miss path
    that grows with what the misses ask for (the ids a batch read fetches) is the misses' cost: it
    stays a finding, ranked below the cache miss."""
    _payload_on_miss_path(findings)
    _forward_of_grown_requests(findings)
    _cold_peer_calls(findings)
    cold = max((fd.confidence for fd in findings if fd.pattern == "cold_start"), default=0.0)
    if cold >= 0.5:
        for fd in findings:
            stats = fd.evidence.get("stats", {})
            warm, settled = stats.get("warm_up_miss_rate"), stats.get("settled_miss_rate")
            if fd.pattern == "cache_miss" and warm is not None and warm > 2 * max(settled or 0.0, 1e-3):
                fd.confidence = min(fd.confidence, 0.9 * cold)
                stats["part_of"] = "cold_start"
                fd.evidence["summary"] += (
                    f" Misses pile up in the first requests of each instance ({warm:.0%} vs {settled:.0%} "
                    "once settled): part of the cold start."
                )
    return findings


def _cold_peer_calls(findings: list[Finding]) -> None:
    """slow_dependency on a call whose tail is mostly a replica's first calls (a cold_start finding
    >= 0.5 on the same call, from the callee it names: cold_peers.py, or the callee's data gone cold
    at one moment: cold_after_change.py), or a queue for the untraced
    callee's workers that follows the arrivals (callee_queue.py): the callee is slow because it is
    cold or busy, a possible cause beside it at most; compute_bound on a span inside the queued call
    (a sidecar's span read as the model's forward) is that queue's wait."""
    for cold in findings:
        stats = cold.evidence.get("stats", {})
        if cold.confidence < NAMED or (cold.pattern, stats.get("mechanism")) not in (
                ("cold_start", COLD_PEER), ("cold_start", COLD_DATA), ("queueing", CALLEE_QUEUE)):
            continue
        for fd in findings:  # the callee's own part of the call's share, where it is traced
            own = fd.evidence.get("stats", {})
            share = (own.get("tail_excess_share") or 0.0) * (own.get("callee_share") or 1.0)
            beyond = stats.get("call_tail_excess_share_beyond_them", 0.0)  # slow on its own too
            calls = stats.get("call_names") or (cold.span_name,)  # a sidecar's outbound span: the call's
            queue = stats.get("mechanism") == CALLEE_QUEUE
            if fd.pattern == "compute_bound" and queue and fd.span_name in calls:
                fd.confidence = min(fd.confidence, 0.45)  # the untraced callee's queue wait, in the call
                fd.evidence.setdefault("stats", {})["part_of"] = cold.pattern
                fd.evidence["summary"] += f" Its time is the callee's queue (see {cold.pattern}: part of it)."
                continue
            if fd.pattern == "slow_dependency" and fd.span_name in calls and beyond < MATERIAL and \
                    stats["tail_excess_share"] >= 0.5 * share:
                fd.confidence = min(fd.confidence, 0.45)
                fd.evidence["stats"]["part_of"] = cold.pattern
                fd.evidence["summary"] += f" Its tail is {cold.pattern} at the callee (part of it)."


def _forward_of_grown_requests(findings: list[Finding]) -> None:
    """compute_bound on a forward pass inside a call that a large_payload finding (>= 0.5) says grew
    with sizes that changed during the run: the requests grew and the model's time with them, so the
    cause is the payload (ranked first); the busy model stays a finding below it."""
    grown = [fd for fd in findings if fd.pattern == "large_payload" and fd.confidence >= NAMED
             and fd.evidence.get("stats", {}).get("forward_inside")]
    for fd in findings:
        payload = next((g for g in grown if fd.span_name in g.evidence["stats"]["forward_inside"]), None)
        if fd.pattern != "compute_bound" or payload is None or fd.confidence < payload.confidence:
            continue
        fd.confidence = 0.9 * payload.confidence
        fd.evidence.setdefault("stats", {})["part_of"] = "large_payload"
        fd.evidence["summary"] += (
            f" The requests grew ({payload.evidence['stats']['size_attribute']} changed during the run, see "
            f"large_payload on '{payload.span_name}') and the forward with them: part of that finding."
        )


def _payload_on_miss_path(findings: list[Finding]) -> None:
    """large_payload on a call that a cache_miss finding (>= 0.5) says is made on its slow path only:
    its size is what the misses fetch, so its growth is theirs."""
    caches = [fd for fd in findings if fd.pattern == "cache_miss" and fd.confidence >= 0.5]
    for fd in findings:
        if fd.pattern != "large_payload":
            continue
        for cache in caches:
            if fd.span_name in cache.evidence.get("stats", {}).get("slow_path_spans", ()):
                fd.confidence = min(fd.confidence, 0.9 * cache.confidence)
                fd.evidence.setdefault("stats", {})["part_of"] = "cache_miss"
                fd.evidence["summary"] += (
                    f" '{fd.span_name}' is called only on the miss path of '{cache.span_name}': what it "
                    "fetches is what the cache missed, so its size grows with the misses (part of the "
                    "cache miss)."
                )
                break


def _wraps(frame: TraceFrame, outer: str, inner: str) -> bool:
    """Whether most spans named `inner` sit inside a span named `outer` (parent or grandparent)."""
    if outer not in frame.names or inner not in frame.names or outer == inner:
        return False
    a, b = frame.names.index(outer), frame.names.index(inner)
    spans = np.nonzero(frame.name == b)[0]
    if len(spans) == 0:
        return False
    up = frame.parent[spans]
    hit = (up >= 0) & (frame.name[np.maximum(up, 0)] == a)
    up2 = np.where(up >= 0, frame.parent[np.maximum(up, 0)], -1)
    hit |= (up2 >= 0) & (frame.name[np.maximum(up2, 0)] == a)
    return bool(hit.mean() >= 0.5)


def speaks_for(findings: list[Finding], frame: TraceFrame, min_confidence: float = 0.3):
    """Whether a finding of some weight speaks for a span name: its own, or one it wraps or that wraps
    it (a lock_contention finding on `postprocess` speaks for the `lock.wait` inside it)."""
    named = {fd.span_name for fd in findings if fd.span_name and fd.confidence >= min_confidence}

    def covered(name: str) -> bool:
        return name in named or any(_wraps(frame, name, n) or _wraps(frame, n, name) for n in named)

    return covered


def merge_nested(findings: list[Finding], frame: TraceFrame) -> list[Finding]:
    """One cause seen on a span and again on the span that wraps it (a slow `feature_lookup` makes its
    parent `preprocess` slow too) is one finding: the inner span's, which names the work. Unless the
    inner one is a possible cause only (< 0.5) where the outer one is named: then they are two modes of
    different things (a rare slow Redis call inside a request whose cache misses changed), and the
    outer one keeps its own evidence."""
    drop = set()
    for i, outer in enumerate(findings):
        if i in drop:
            continue
        for j, inner in enumerate(findings):
            if i == j or j in drop or outer.pattern != inner.pattern:
                continue
            if outer.span_name and inner.span_name and _wraps(frame, outer.span_name, inner.span_name):
                if inner.confidence < NAMED <= outer.confidence:
                    drop.add(j)
                    continue
                drop.add(i)
                inner.evidence["summary"] += (
                    f" The same cause shows on the span around it, '{outer.span_name}' "
                    f"(confidence {outer.confidence:.2f})."
                )
                inner.confidence = max(inner.confidence, outer.confidence)
                break
    return [fd for k, fd in enumerate(findings) if k not in drop]


def diagnose_frame(
    frame: TraceFrame, seed: int = 0, progress: Callable[[float, str], None] | None = None
) -> Diagnosis:
    """All detectors over a built frame. A detector that fails is reported in `errors`, not raised.
    `progress(fraction, step)` hears of each detector (after the read, which is the first 40 %). A run
    with asynchronous work (units.py) is diagnosed per kind of unit of work, the findings merged
    (unit_merge.py)."""
    groups, why = splits.split(frame)
    client_rooted = why == "client"
    if groups is None:
        return _diagnose_units(frame, seed, progress)
    started = time.perf_counter()
    parts = []
    for i, group in enumerate(groups):
        part_progress = None
        if progress is not None:
            def part_progress(x: float, step: str, i: int = i, unit: str = group.entry) -> None:
                progress(READ_SHARE + (x - READ_SHARE) * (i + 1) / len(groups), f"{unit}: {step}")
        parts.append((group, _diagnose_units(group.frame, seed, part_progress)))
    if client_rooted:  # the client's leg and the relay in the first; the service's own in the second
        parts[0][1].findings = client_leg.outside(frame, groups[1].frame, parts[0][1].findings)
    findings, summaries, primary = unit_merge.merge(parts)
    main = parts[primary][1]
    errors = {f"{p.entry}: {k}": v for p, d in parts for k, v in d.errors.items()}
    enough = [d.reason for _, d in parts if d.requests >= unit_merge.MIN_UNITS]
    return Diagnosis(
        frame.run,
        parts[0][1].requests if client_rooted else sum(d.requests for _, d in parts),  # the same requests
        len(frame),
        findings,
        time.perf_counter() - started,
        errors,
        None if enough else main.reason,
        main.tail,
        sample.describe(frame.sample, frame, seed) if frame.sample is not None else {},
        summaries,
    )


def _diagnose_units(
    frame: TraceFrame, seed: int = 0, progress: Callable[[float, str], None] | None = None
) -> Diagnosis:
    """All detectors over one population of units of work (the run's requests, as a rule)."""
    started = time.perf_counter()
    n_req = len(frame.requests) if frame.requests is not None else 0
    if n_req == 0:
        return Diagnosis(frame.run, 0, len(frame), [], reason="no request root spans in this run")
    ctx = Context(frame, seed=seed)
    findings: list[Finding] = []
    errors: dict[str, str] = {}
    for i, detector in enumerate(DETECTORS):
        if progress is not None:
            progress(
                READ_SHARE + (1 - READ_SHARE) * i / (len(DETECTORS) + 1), f"looking for {detector.PATTERN}"
            )
        try:
            findings.extend(detector.detect(ctx))
        except Exception as error:  # a detector bug must not hide the others' findings
            errors[detector.PATTERN] = f"{type(error).__name__}: {error}"
    findings = burst_waits.settle(ctx, findings)  # before merging: the outer lock span holds the waits
    findings = first_calls.settle(ctx, findings)  # a new instance's init read as another mechanism
    findings = retransmits.settle(ctx, findings)  # a lossy path's timer read as a slow dependency
    findings = callee_waits.settle(ctx, findings)  # a call in its callee's accept queue: no lock
    findings = reported_waits.settle(ctx, findings)  # a callee's reported queue read as a slow callee
    findings = dependency_tail.settle_forward(findings)  # one model host's stalls read as compute
    findings = new_kinds.settle(ctx, findings)  # a compile for a new kind of input read as a pause
    findings = batch_timer.settle(ctx, findings)  # a forward whose batches a batcher's timer grows
    findings = payload_holders.settle(findings)  # stalls held by work that grew with its payload
    findings = held_slots.settle(ctx, arbitrate(merge_nested(findings, frame)))
    findings = miss_wave.settle(findings)  # a wave's miss count read as a payload
    findings = calibration.gate(findings)  # a finding without its mechanism's own signature: < 0.5
    findings = [fd for fd in findings if fd.confidence >= MIN_CONFIDENCE]
    shares.apportion(findings)
    findings = shares.rank(findings)  # the named causes by their share of the tail excess
    try:  # where a material tail goes that the named causes leave unaccounted for: listed after them
        findings.extend(unexplained.account(ctx, findings, speaks_for(findings, frame)))
    except Exception as error:
        errors[unexplained.PATTERN] = f"{type(error).__name__}: {error}"
    named = shares.apportion(findings)
    try:  # every finding names the service and instances where it acts
        where.locate(ctx, [fd for fd in findings if fd.pattern != unexplained.PATTERN])
    except Exception as error:
        errors["where"] = f"{type(error).__name__}: {error}"
    reason = None if n_req >= 50 else f"only {n_req} requests: too few to diagnose (50 needed)"
    seconds = time.perf_counter() - started
    return Diagnosis(
        frame.run,
        n_req,
        len(frame),
        findings,
        seconds,
        errors,
        reason,
        _tail(ctx, named, findings),
        sample.describe(frame.sample, frame, seed) if frame.sample is not None else {},
    )


def _tail(ctx: Context, named: float, findings: list[Finding]) -> dict[str, float]:
    """The tail the findings' shares are of: p50/p99 (ms), the tail's quantile (p99, or p95 for small
    runs), its requests' mean excess over the middle half's (p25-p75, ms) and how much of it the named
    causes and the unexplained-tail findings account for."""
    latency, weight = ctx.frame.requests.latency, ctx.split.weight
    if weight is None:
        p50, p99 = np.percentile(latency, [50, 99])
    else:  # a head-sampled run: the population's (weighted, as the views give them)
        p50, p99 = (weighted_quantile(latency, weight, q) for q in (0.5, 0.99))
    rest = sum(fd.share or 0.0 for fd in findings if fd.pattern == unexplained.PATTERN)
    return {
        "p50_ms": round(float(p50) / 1e6, 3),
        "p99_ms": round(float(p99) / 1e6, 3),
        "tail_from_quantile": round(float(ctx.split.quantile), 4),
        "excess_ms": round(max(0.0, float(ctx.split.excess_ns)) / 1e6, 3),
        "named_share": round(named, 4),
        "unexplained_share": round(rest, 4),
    }
