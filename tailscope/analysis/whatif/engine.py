"""Evaluate every lever on one run: re-time its requests, replay its queue where the lever changes
what the queue sees, and report p50/p95/p99 after each fix beside the run as measured."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.diagnosis.stats import weighted_quantile
from tailscope.analysis.whatif import cause_levers as cl
from tailscope.analysis.whatif import levers as lv
from tailscope.analysis.whatif import lock_levers as lk
from tailscope.analysis.whatif import pool_levers as pl
from tailscope.analysis.whatif import queue_levers as ql
from tailscope.analysis.whatif.attempts import abandoned_attempts, answered_in_time
from tailscope.analysis.whatif.batches import as_calm_batches, batch_consumers, replay_batches
from tailscope.analysis.whatif.blocked_workers import loop_unblocked, unblocked_lever
from tailscope.analysis.whatif.cold_levers import prewarmed
from tailscope.analysis.whatif.compose import combinations
from tailscope.analysis.whatif.deadlines import capped_calls, expiry_retimed
from tailscope.analysis.whatif.dependency_levers import dependency_as_calm
from tailscope.analysis.whatif.down_peers import with_restart_peers
from tailscope.analysis.whatif.handlers import handlers, replay_handlers
from tailscope.analysis.whatif.host_levers import host_as_peers, lock_as_peers, stalls_as_peers
from tailscope.analysis.whatif.in_order import payload_in_order
from tailscope.analysis.whatif.network_levers import connects_reused, network_p50
from tailscope.analysis.whatif.payload_levers import batched_calls, payload_at_median
from tailscope.analysis.whatif.peer_levers import no_pauses_as_peers
from tailscope.analysis.whatif.pool_waits import requeued_lever
from tailscope.analysis.whatif.process_levers import no_process_pauses, with_stretched_steps
from tailscope.analysis.whatif.refusals import no_refusals
from tailscope.analysis.whatif.replay import BatchCost, replay
from tailscope.analysis.whatif.retime import Edit, Retimed, layout, retime, unit_latency, unit_weight
from tailscope.analysis.whatif.served import replica_routing, served
from tailscope.analysis.whatif.stall_levers import stalled_own_time_as_calm
from tailscope.analysis.whatif.stalls import on_period, stalls_to_remove, timing_stalls
from tailscope.analysis.whatif.timer_levers import timer_quanta

WHATIF_VERSION = 20  # part of the dashboard's cache key: bump when a lever's model changes
MIN_CONFIDENCE = 0.2  # findings judged at least possible get their lever
CLIENT_SIDE = 0.5  # latency is client-observed where at least half the requests have a client span


@dataclass
class Outcome:
    key: str
    label: str
    kind: str  # measured | model | software | hardware | capacity
    model: str
    p50_ms: float
    p95_ms: float
    p99_ms: float
    pattern: str | None = None
    span_name: str | None = None
    params: dict[str, float] = field(default_factory=dict)
    p99_change: float = 0.0  # against the run as measured (-0.25: 25 % lower)
    meets_slo: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class WhatIf:
    run: str
    requests: int
    latency: str  # "client-observed" or "server" (the request root's span)
    measured: Outcome
    model_check: Outcome | None  # the queue replay of the unchanged run (how close the model starts)
    outcomes: list[Outcome]
    slo_ms: float | None = None
    seconds: float = 0.0
    reason: str | None = None
    # a run with asynchronous work (diagnosis/units.py): the kind of unit evaluated ("consumer") and
    # its entry point, the population the diagnosis reports; None: the run's requests
    unit: str | None = None
    entry_point: str | None = None

    def for_finding(self, finding: dict[str, Any]) -> Outcome | None:
        """The fix that answers a finding (its pattern and span), for the finding's card."""
        pattern, name = finding.get("pattern"), finding.get("span_name")
        hits = [o for o in self.outcomes if o.pattern == pattern]
        named = [o for o in hits if o.span_name == name]
        pick = named or hits
        return min(pick, key=lambda o: o.p99_ms) if pick else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "requests": self.requests,
            "latency": self.latency,
            "slo_ms": self.slo_ms,
            "measured": self.measured.to_dict(),
            "model_check": self.model_check.to_dict() if self.model_check else None,
            "outcomes": [o.to_dict() for o in self.outcomes],
            "seconds": round(self.seconds, 3),
            "reason": self.reason,
            "unit": self.unit,
            "entry_point": self.entry_point,
            "version": WHATIF_VERSION,
        }


def _requeue(x: lv.Inputs, lever: lv.Lever, edit: Edit, first: Retimed) -> Edit:
    """The edit with the queue replayed: new arrivals (first re-timing), the edited forward times."""
    s, f, lay = x.served, x.frame, x.lay
    assert s is not None
    new_start = first.absolute_start(f, lay)
    hole = s.queue < 0
    gap_now = np.maximum(lay.gap[s.forward] - edit.cut_before[s.forward], 0)
    arrival = np.where(hole, new_start[s.forward] - gap_now, new_start[np.maximum(s.queue, 0)])
    arrival = arrival.astype(np.float64)
    if lever.arrival_shift is not None:
        arrival = arrival - lever.arrival_shift[s.request]
    service = first.dur[s.forward].astype(np.float64)
    lead = np.unique(s.batch, return_index=True)[1]
    cost = BatchCost.fit(s.size[lead], service[lead])
    residual = service / np.asarray(cost(s.size))
    pool, servers, moved = replica_routing(s, lever.extra_servers, x.seed)
    if moved.any():  # a moved request leaves its instance's pauses and warm-up behind: typical noise
        draw = np.random.default_rng([x.seed, 12]).integers(0, len(residual), int(moved.sum()))
        residual[moved] = residual[draw]
    wait, took = np.zeros(len(arrival)), np.zeros(len(arrival))
    for p, c in servers.items():
        sel = np.nonzero(pool == p)[0]
        if len(sel) == 0:
            continue
        window = s.window_ns if lever.window_ns is None else lever.window_ns
        r = replay(arrival[sel], residual[sel], cost, c, s.max_batch, window, lever.scale)
        wait[sel], took[sel] = r.start - arrival[sel], r.end - r.start
    out = Edit(edit.dur.copy(), edit.cut_before.copy(), edit.cut_after.copy())
    out.dur[s.queue[~hole]] = wait[~hole]
    out.cut_before[s.forward[hole]] = lay.gap[s.forward[hole]] - wait[hole]
    out.dur[s.forward] = took
    return out


def _percentiles(latency: np.ndarray, weight: np.ndarray | None, percents: tuple[int, ...]) -> list[float]:
    """The latencies' percentiles, weighted where requests stand for others (a head-sampled run)."""
    if weight is None:
        return [float(v) for v in np.percentile(latency, list(percents))]
    return [weighted_quantile(latency, weight, p / 100) for p in percents]


def _outcome(lever_like: dict[str, Any], latency: np.ndarray, measured_p99: float, slo_ms: float | None,
             weight: np.ndarray | None = None) -> Outcome:
    p50, p95, p99 = (v / 1e6 for v in _percentiles(latency, weight, (50, 95, 99)))
    return Outcome(
        p50_ms=round(p50, 3),
        p95_ms=round(p95, 3),
        p99_ms=round(p99, 3),
        p99_change=round(p99 * 1e6 / measured_p99 - 1, 4) if measured_p99 > 0 else 0.0,
        meets_slo=None if slo_ms is None else bool(p99 <= slo_ms),
        **lever_like,
    )


def plan(
    x: lv.Inputs,
    k: float = 0.5,
    extra_replicas: int = 1,
    deadline_ms: float | None = None,
    speedup: float | None = None,
    speedup_from: str | None = None,
    hedge_ms: float | None = None,
) -> list[lv.Lever]:
    """The levers for a run: one per finding that a fix can answer, and those that always apply."""
    out: list[lv.Lever | None] = []
    for fd in x.findings:
        if (fd.get("confidence") or 0) < MIN_CONFIDENCE:
            continue
        p = fd.get("pattern")
        if p == "cache_miss":
            out.append(lv.cache_hits(x, fd))
        elif p == "lock_contention":
            # (a lock at calls that finish in order on one connection: its holders are large replies)
            out += [lk.no_lock_wait(x, fd), lk.pool_held_as_calm(x, fd), lk.waits_as_calm(x, fd),
                    lk.no_stated_wait(x, fd), lk.slow_holders(x, fd), payload_in_order(x, fd),
                    lock_as_peers(x, fd)]
            if ((fd.get("evidence") or {}).get("stats") or {}).get("held_in_process"):
                out.append(no_process_pauses(x, fd))  # a resource held through released stretches
        elif p == "slow_dependency":
            out += [unblocked_lever(x, requeued_lever(x, lv.dependency_p50(x, fd))), no_refusals(x, fd),
                    lv.dependency_deadline(x, fd, deadline_ms), timer_quanta(x, fd),
                    requeued_lever(x, dependency_as_calm(x, fd)), cl.hedged_callee_fixed(x, fd)]
        elif p == "network":
            out += [network_p50(x, fd), connects_reused(x, fd), timer_quanta(x, fd)]
        elif p == "cold_start":
            out += [with_restart_peers(x, prewarmed(x, fd), fd), ql.scaled_out_early(x, fd)]
        elif p == "timeout_retry":  # refused (429, Retry-After), not cut at a deadline: no hung callee
            out += [no_refusals(x, fd) or cl.callee_p50(x, fd), cl.no_timeouts(x, fd),
                    cl.hedged(x, fd, hedge_ms), timer_quanta(x, fd)]
        elif p == "large_payload":  # a call repeated per item (N+1), else the payload's size
            out += [batched_calls(x, fd) or payload_at_median(x, fd), payload_in_order(x, fd)]
        elif p in ("cpu_throttling", "compute_bound"):  # no quota period seen / on some hosts only:
            # a host slower than its peers at the same work (CPU stolen), at their speed
            out.append((p == "cpu_throttling" and cl.no_throttling(x, fd)) or host_as_peers(x, fd))
        elif p == "gc_pause":  # one process's pauses, where no instance's are seen
            out.append(no_process_pauses(x, fd))
        elif p == "queueing" and fd.get("span_name"):
            out += [pl.wait_span_as_calm(x, fd), pl.pool_as_calm(x, fd), loop_unblocked(x, fd),
                    no_refusals(x, fd)]  # (a rate limit meters admission: a wait for budget)
    paused = [fd for fd in x.findings
              if fd.get("pattern") == "gc_pause" and (fd.get("confidence") or 0) >= MIN_CONFIDENCE]
    out += [
        with_stretched_steps(x, lv.no_stalls(x), paused),
        no_pauses_as_peers(x) if paused else None,  # (then: only allocating threads stall; one heap)
        *[lever(x, fd) for fd in paused for lever in (stalled_own_time_as_calm, stalls_as_peers)],
        ql.queue_within_window(x),
        ql.queue_no_window(x),
        ql.queue_as_calm(x),
        ql.handlers_as_calm(x),
        ql.more_replicas(x, extra_replicas),
        ql.forward_scaled(x, k),
    ]
    if any(fd.get("pattern") == "queueing"
           and (fd.get("confidence") or 0) >= MIN_CONFIDENCE for fd in x.findings) and ql.no_queue_in_sight(
            x, out):
        # no queue in sight (none named, or the named span is no wait: a root whose backlog shows only
        # in a queue-time attribute): the requests of busy stretches
        out.append(ql.requests_as_calm(x))
    if speedup is not None:
        label = f"Model forward as measured in '{speedup_from}' (× {speedup:.2f})"
        out.append(ql.forward_scaled(x, speedup, label, key=f"forward_as:{speedup_from}"))
    seen: set[str] = set()
    levers = []
    for lever in out:
        if lever is not None and lever.key not in seen:
            seen.add(lever.key)
            levers.append(lever)
    return levers


def inputs(frame: TraceFrame, findings: list[dict[str, Any]], seed: int = 0) -> lv.Inputs:
    from tailscope.analysis.diagnosis.model import Context

    lay = layout(frame)
    stage = Context(frame, seed=seed).stage
    x = lv.Inputs(frame, lay, stage, served(frame, stage, lay), findings, seed)
    x.stalls = stalls_to_remove(frame, findings, seed)
    x.handlers = handlers(frame)
    x.batches = batch_consumers(frame, lay, seed)
    x.attempts = abandoned_attempts(frame, lay)
    x.capped = capped_calls(frame, lay)
    if any(fd.get("pattern") == "cpu_throttling" and (fd.get("confidence") or 0) >= MIN_CONFIDENCE
           for fd in findings):
        timed = timing_stalls(frame, seed, quota=True)
        x.throttle_stalls = on_period(timed) if timed is not None else None
    return x


def evaluate(
    frame: TraceFrame,
    findings: list[dict[str, Any]],
    *,
    seed: int = 0,
    k: float = 0.5,
    extra_replicas: int = 1,
    deadline_ms: float | None = None,
    slo_ms: float | None = None,
    speedup: float | None = None,
    speedup_from: str | None = None,
    hedge_ms: float | None = None,
    only: set[str] | None = None,
    combine: list[tuple[str, ...]] | None = None,
    scored: np.ndarray | None = None,
) -> WhatIf:
    """Every lever's p50/p95/p99 on one built frame. `findings`: the diagnosis' findings as dicts
    (Finding.to_dict(), with charts). `only`: evaluate just the levers whose key starts with one of
    these. `hedge_ms`: the hedge delay of a retried call's lever (default: the call's p95).
    `combine`: also fixes at once, each a tuple of key prefixes (every choice of one lever each).
    `scored`: the units counted (a bool each; None: all); every lever still re-times the whole run."""
    started = time.perf_counter()
    reqs = frame.requests
    n = len(reqs) if reqs is not None else 0
    blank = {"key": "measured", "label": "As measured", "kind": "measured",
             "model": "the run's own latencies"}
    if n == 0:
        empty = Outcome(p50_ms=0.0, p95_ms=0.0, p99_ms=0.0, **blank)
        reason = "no request root spans in this run"
        return WhatIf(frame.run, 0, "server", empty, None, [], slo_ms, reason=reason)
    client_side = bool((reqs.client_span >= 0).mean() >= CLIENT_SIDE)
    base = unit_latency(frame, None, None, client_side)
    weight = unit_weight(frame)
    keep = np.asarray(scored, bool) if scored is not None and len(scored) == len(base) else slice(None)
    base, weight = base[keep], weight if weight is None else weight[keep]
    measured_p99 = _percentiles(base, weight, (99,))[0]
    measured = _outcome(blank, base, measured_p99, slo_ms, weight)
    x = inputs(frame, findings, seed)
    check = None
    if x.served is not None:
        noop = lv.Lever(
            "model_check",
            "The model, nothing changed",
            "model",
            "the queue replayed with the run's own arrivals and service times",
            Edit.none(len(frame)),
        )
        lat = _latency(x, noop, client_side)[keep]
        check = _outcome(_describe(noop), lat, measured_p99, slo_ms, weight)
    outcomes = []
    levers = plan(x, k, extra_replicas, deadline_ms, speedup, speedup_from, hedge_ms)
    for lever in levers + combinations(levers, combine or []):
        if only is not None and not any(lever.key.startswith(o) for o in only):
            continue
        latency = _latency(x, lever, client_side)[keep]
        outcomes.append(_outcome(_describe(lever), latency, measured_p99, slo_ms, weight))
    latency = "client-observed" if client_side else "server"
    if reqs.message_span is not None:
        latency = "per message, publish to processed"
    return WhatIf(frame.run, n, latency, measured, check, outcomes, slo_ms, time.perf_counter() - started)


def _describe(lever: lv.Lever) -> dict[str, Any]:
    return {
        "key": lever.key,
        "label": lever.label,
        "kind": lever.kind,
        "model": lever.model,
        "pattern": lever.pattern,
        "span_name": lever.span_name,
        "params": dict(lever.params),
    }


def _retimed(x: lv.Inputs, lever: lv.Lever) -> Retimed:
    """Each span's duration (ns) after the lever: re-timed, the model's and handlers' queues replayed."""
    edit = lever.edit
    first = retime(x.frame, edit, x.lay)
    if (lever.requeue or lever.key == "model_check") and x.served is not None:
        edit = _requeue(x, lever, edit, first)
        first = retime(x.frame, edit, x.lay)
    # attempts cut at their deadline whose callee now ends in time: answered, not made again
    answered = answered_in_time(x.frame, x.lay, x.attempts, edit, first)
    if answered is not None:
        edit, first = answered, retime(x.frame, answered, x.lay)
    # calls that expired at a deadline while the lever removed a stall: as the undisturbed calls
    rescued = expiry_retimed(x.frame, x.capped, edit, x.rng(46), x.attempts and x.attempts.call)
    if rescued is not None:
        edit, first = rescued, retime(x.frame, rescued, x.lay)
    # the waits for handler threads follow every change of service times (a slow call's holds)
    if x.handlers is not None and not lever.handlers_set:
        first = retime(x.frame, _rehandle(x, lever, edit, first), x.lay)
    return first


def _rehandle(x: lv.Inputs, lever: lv.Lever, edit: Edit, first: Retimed) -> Edit:
    """The edit with the calls' waits for a handler thread replayed: each call arrives at its new
    CLIENT start plus its network time (earlier by the lever's shift: a caller that read it late),
    and is served by its instance's threads (or the pool the lever routes it to) with its re-timed
    SERVER span's duration."""
    h, f = x.handlers, x.frame
    assert h is not None
    arrival = first.absolute_start(f, x.lay)[h.client] + h.net
    if lever.handler_shift is not None:
        arrival = arrival - lever.handler_shift
    wait = replay_handlers(h, arrival, first.dur[h.server].astype(np.float64), lever.extra_slots,
                           lever.handler_pools)
    out = Edit(edit.dur.copy(), edit.cut_before.copy(), edit.cut_after.copy())
    out.cut_before[h.server] = (f.start[h.server] - f.start[h.client]) - (h.net + wait)
    return out


def _latency(x: lv.Inputs, lever: lv.Lever, client_side: bool) -> np.ndarray:
    return _unit_latency(x, lever, _retimed(x, lever), client_side)


def _unit_latency(x: lv.Inputs, lever: lv.Lever, timed: Retimed, client_side: bool) -> np.ndarray:
    """The run's latencies after a lever: a batch consumer's messages replayed through its processes
    with the batches formed again (batches.py; not where the lever sets the waits itself), else
    the re-timed units'."""
    if x.batches is not None and not lever.handlers_set:
        return replay_batches(x.batches, timed, x.lay, lever.extra_slots)
    latency = unit_latency(x.frame, timed, x.lay, client_side)
    if x.batches is not None:  # the lever set the batches' waits: as calm batches' messages
        latency = as_calm_batches(x.batches, lever.edit, latency, x.rng(9))
    return latency


def lever_timings(
    frame: TraceFrame, findings: list[dict[str, Any]], key: str, *, seed: int = 0, **options: Any
) -> tuple[np.ndarray, np.ndarray] | None:
    """One lever's re-timed run: (each request's latency, each span's duration), ns, as evaluate()
    computes its percentiles (None: no lever of that key); `options`: plan()'s keywords."""
    reqs = frame.requests
    if reqs is None or len(reqs) == 0:
        return None
    client_side = bool((reqs.client_span >= 0).mean() >= CLIENT_SIDE)
    x = inputs(frame, findings, seed)
    for lever in plan(x, **options):
        if lever.key == key:
            timed = _retimed(x, lever)
            return _unit_latency(x, lever, timed, client_side), timed.dur
    return None
