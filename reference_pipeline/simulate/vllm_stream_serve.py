"""The router in front of the vLLM replicas of `vllm-stream` (vllm_stream.py) and the event loop that
runs the replicas' engines (vllm_stream_engine.py) in time order with the calls arriving from the
gateway.

The router sends each call to the replica with the fewest outstanding requests: its own live count
(dispatched, not yet finished), or, with `report_s`, the replicas' own `running + waiting` as its last
scrape of their metrics saw it (every request in between goes to the same replica). A restart: at
`down` the replica's server closes its listener and finishes the streams it has (graceful), the
process then loads its weights and captures its CUDA graphs and is back at `up` (cold: an empty prefix
cache, no adapters, slow first steps). A router that is told (a preStop hook) stops sending at once; one
that relies on its health check keeps sending for `detect_s`: those calls are refused and the client
(the OpenAI SDK: 2 retries, 0.5 s backoff doubling, jittered) tries again through the router. After
`up` the replica either rejoins least-outstanding at once (it has none: it takes every new call until
it catches up) or slow-starts over `ramp_s`.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S
from reference_pipeline.simulate.vllm_stream_engine import Replica, Seq


@dataclass(frozen=True)
class Restart:
    replica: int
    down: float  # ns
    up: float
    detect_s: float  # how long the router keeps sending to the closed listener
    ramp_s: float  # slow start after up (0: none)


@dataclass
class Call:
    """One LLM call as the router and the engines saw it."""

    seq: Seq
    send: float  # the gateway sends it (ns)
    replica: int = -1
    refused: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, replica)
    failed: bool = False


def serve(calls: list[Call], replicas: list[Replica], rng: random.Random, report_s: float = 0.0,
          restart: Restart | None = None) -> None:
    """Run the router and the engines until every call is done (or refused for good)."""
    events = [(c.send, k, 0, c) for k, c in enumerate(calls)]
    heapq.heapify(events)
    snapshot = [0] * len(replicas)
    next_report = 0.0
    inf = float("inf")
    while True:
        ta = events[0][0] if events else inf
        rt, rep = inf, None
        for r in replicas:
            if r.busy():
                start = r.t if r.running else max(r.t, r.waiting[0].arrive)
                if start < rt:
                    rt, rep = start, r
        if ta == inf and rep is None:
            return
        if rep is not None and rt < ta:
            rep.step()
            continue
        _, k, attempt, call = heapq.heappop(events)
        if report_s and ta >= next_report:
            snapshot = [len(r.running) + len(r.waiting) for r in replicas]
            next_report = ta + report_s * NS_PER_S * rng.uniform(0.9, 1.1)
        j = _choose(replicas, ta, rng, snapshot if report_s else None, restart)
        if restart is not None and j == restart.replica and restart.down <= ta < restart.up:
            end = ta + rng.uniform(0.8, 2.0) * NS_PER_MS  # connection refused
            call.refused.append((ta, end, j))
            if attempt >= 2:
                call.failed = True
                continue
            backoff = min(0.5 * 2**attempt, 8.0) * (1.0 - 0.25 * rng.random())
            heapq.heappush(events, (end + backoff * NS_PER_S, k, attempt + 1, call))
            continue
        call.replica = j
        r = replicas[j]
        call.seq.arrive = ta + (0.6 + 0.0004 * call.seq.prompt) * NS_PER_MS  # HTTP + tokenize
        if not r.busy():
            r.t = max(r.t, call.seq.arrive)
        r.waiting.append(call.seq)
        r.outstanding += 1
        if restart is not None and j == restart.replica and ta >= restart.up and r.slow is None:
            r.slow = (restart.up, 8.0 * NS_PER_S)  # a fresh process: cold caches, slow first steps
            r.prefix_touch.clear()
            r.loaded.clear()
            r.host.clear()


def _choose(replicas: list[Replica], t: float, rng: random.Random, snapshot: list[int] | None,
            restart: Restart | None) -> int:
    names = list(range(len(replicas)))
    if restart is not None:
        gone = restart.down + restart.detect_s * NS_PER_S <= t < restart.up
        if gone:
            names.remove(restart.replica)
        elif restart.ramp_s and restart.up <= t < restart.up + restart.ramp_s * NS_PER_S:
            share = (t - restart.up) / (restart.ramp_s * NS_PER_S) / len(replicas)
            if rng.random() >= share:
                names.remove(restart.replica)
    load = snapshot if snapshot is not None else [r.outstanding for r in replicas]
    best = min(load[j] for j in names)
    return rng.choice([j for j in names if load[j] == best])
