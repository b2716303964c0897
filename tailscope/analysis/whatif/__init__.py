"""What if: each fix's p50/p95/p99, predicted from the run's own trace.

    result = whatif(store, "prod")             # load the run, diagnose it, evaluate every lever
    result = evaluate(frame, findings)         # the same on a built TraceFrame and the findings' dicts

Every request of the run is re-timed with the cause removed (retime.py: its critical path through
the changed spans, parallel children and the time no span covers honoured), and where a fix changes
what the queue in front of the model sees, the run's arrivals are replayed through that queue with
the measured service times (served.py, replay.py). The levers (levers.py) come from the diagnosis'
findings, plus those that always apply (the model's forward × k, more replicas, no pauses, no queue
beyond the batching window). A what-if is a model built from the run's own timings: it cannot know
what a fix changes elsewhere (arrivals that follow faster answers, load moved onto another service,
a cache that evicts differently), and it says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.engine import WHATIF_VERSION, Outcome, WhatIf, evaluate

__all__ = ["WHATIF_VERSION", "Outcome", "WhatIf", "evaluate", "measured_speedup", "unit_population", "whatif"]

LIMITS = (
    "A what-if is a model built from this run's own timings: each fix re-times the requests that were "
    "measured, through their critical paths, and replays the queue before the model where the fix changes "
    "it. It cannot know what a fix changes beyond that: arrivals that change because answers come faster "
    "(retries, closed-loop clients), load a fix moves onto another service, a cache or a batcher that "
    "behaves differently at another load. The queue replay assumes FIFO batching at the batching window "
    "the run shows; more replicas assume requests spread evenly and hardware of their own (a worker added "
    "on the same CPU cores shares them, and every forward pass slows)."
)


def measured_speedup(frame, other) -> float | None:
    """The forward pass's speed-up of another run over this one, matched by batch size: the other
    run's batch cost over this run's at this run's mean batch size (None where either has none)."""
    from tailscope.analysis.whatif.engine import inputs
    from tailscope.analysis.whatif.replay import BatchCost

    costs = []
    size_here = None
    for f in (frame, other):
        s = inputs(f, []).served
        if s is None:
            return None
        lead = np.unique(s.batch, return_index=True)[1]
        costs.append(BatchCost.fit(s.size[lead], f.dur[s.forward][lead]))
        if size_here is None:
            size_here = float(s.size.mean())
    return float(costs[1](size_here) / costs[0](size_here))


def unit_population(frame, findings: list[dict[str, Any]], entry: str | None = None):
    """(frame, its findings, unit kind, entry point) to evaluate: for a run with asynchronous work
    (diagnosis/units.py), the population the diagnosis reports (the top finding's entry point, or
    `entry`) and the findings made in it; else the run's requests and all the findings (None, None).
    ValueError where `entry` names no population of the run."""
    from tailscope.analysis.diagnosis.splits import split

    groups = split(frame)[0] if frame.requests is not None else None
    if not groups:
        if entry is not None:
            raise ValueError(f"run {frame.run!r} has one population of units: no entry point {entry!r}")
        return frame, findings, None, None

    def entry_of(fd: dict[str, Any]) -> str | None:
        return ((fd.get("evidence") or {}).get("stats") or {}).get("entry_point")

    if entry is None:
        named = [entry_of(fd) for fd in findings if entry_of(fd)]
        busiest = max(groups, key=lambda g: (g.unit == "consumer", len(g.frame.requests)))
        entry = named[0] if named else busiest.entry
    pick = next((g for g in groups if g.entry == entry), None)
    if pick is None:
        known = ", ".join(repr(g.entry) for g in groups)
        raise ValueError(f"run {frame.run!r} has no entry point {entry!r}; its populations: {known}")
    mine = [fd for fd in findings if entry_of(fd) in (None, pick.entry)]
    return pick.frame, mine, pick.unit, pick.entry


def whatif(
    source,
    run: str | None = None,
    *,
    findings: list[dict[str, Any]] | None = None,
    other_run: str | None = None,
    seed: int = 0,
    entry: str | None = None,
    **options: Any,
) -> WhatIf:
    """Load one run of a Store (or open connection), diagnose it unless `findings` are given, and
    evaluate every lever. `other_run`: also the forward speed-up measured in that run. A run with
    asynchronous work is evaluated on the population of units the diagnosis reports (or `entry`'s):
    `unit_population`. `options`: evaluate()'s keywords (k, extra_replicas, deadline_ms, hedge_ms,
    slo_ms)."""
    from tailscope.analysis.diagnosis import diagnose_frame, resolve_run
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading

    # inside the reading: the detectors and the payload lever read span attributes from the store
    with reading(source) as conn:
        run = resolve_run(conn, run, other_run)
        frame = load_frame(conn, run)
        other = load_frame(conn, other_run) if other_run else None
        if findings is None:
            findings = [fd.to_dict(with_chart=True) for fd in diagnose_frame(frame, seed=seed).findings]
        speedup = measured_speedup(frame, other) if other is not None else None
        units, findings, unit, entry = unit_population(frame, findings, entry)
        result = evaluate(units, findings, seed=seed, speedup=speedup, speedup_from=other_run, **options)
        result.unit, result.entry_point = unit, entry
        return result
