"""What each planted mechanism adds to a simulated run's tail, from the simulator's own arrays.

The diagnosis must report every cause that carries a material share of the tail excess; which causes
do is a property of the run, not of the detectors. Per request, each mechanism's added time is read
from the model (`Simulation`), then its share of the tail excess (tail: >= p99 of the request
latency the diagnosis sees, body: p25-p75, as stats.tail_split) is computed as for a finding:

- gc_pause: time of the request's span on its process inside stop-the-world pauses;
- slow_dependency: the dependency's own time beyond its median;
- lock_contention: waiting for the lock;
- cache_miss: the store read on a miss (and the wait for a pooled connection);
- queueing: waiting for a batch beyond the median wait;
- cold_start: latency beyond the median of the first 3K requests of each process (K = 5 %, 10-200);
- network: the client's two trips beyond their median (against the client-observed latency).
"""

from __future__ import annotations

import numpy as np

from reference_pipeline.simulate.config import scenario_config
from reference_pipeline.simulate.model import Simulation, simulate
from tailscope.analysis.diagnosis.stats import excess_share, tail_split

MATERIAL = 0.15  # a cause carrying this much of the tail excess must be reported (unexplained.MIN_SHARE)


def _beyond_median(x: np.ndarray) -> np.ndarray:
    return np.maximum(x - np.median(x), 0.0)


def _in_pauses(sim: Simulation, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    out = np.zeros(sim.n)
    for proc in sim.processes:
        mine = np.flatnonzero(sim.process == proc.index)
        if proc.pauses is None or not len(mine) or not len(proc.pauses.at):
            continue
        p0 = proc.pauses.wall_start + sim.config.start_ns
        p1 = p0 + proc.pauses.duration
        cum = np.r_[0.0, np.cumsum(p1 - p0)]

        def upto(t: np.ndarray, p0=p0, p1=p1, cum=cum) -> np.ndarray:
            k = np.searchsorted(p0, t, side="right") - 1
            kk = np.maximum(k, 0)
            return np.where(k >= 0, cum[kk] + np.clip(t - p0[kk], 0, p1[kk] - p0[kk]), 0.0)

        out[mine] = upto(end[mine].astype(float)) - upto(start[mine].astype(float))
    return out


def added_time(sim: Simulation) -> dict[str, np.ndarray]:
    """Per mechanism, the time it adds to each request (ns)."""
    t = sim.times
    root_s, root_e = t["root"]
    lat = (root_e - root_s).astype(float)
    first = np.zeros(sim.n, bool)
    for proc in sim.processes:
        mine = np.flatnonzero(sim.process == proc.index)
        k = int(np.clip(len(mine) * 0.05, 10, 200))
        first[mine[np.argsort(root_s[mine], kind="stable")[: 3 * k]]] = True
    ds = (t["ds_server"][1] - t["ds_server"][0]).astype(float)
    store = np.where(~sim.cache_hit, (t["store_get"][1] - t["store_get"][0]).astype(float), 0.0)
    client = (t["client"][1] - t["client"][0]).astype(float)
    return {
        "gc_pause": _in_pauses(sim, root_s, root_e),
        "slow_dependency": np.where(sim.has_downstream, _beyond_median(ds), 0.0),
        "lock_contention": (t["lock_wait"][1] - t["lock_wait"][0]).astype(float),
        "cache_miss": store,
        "queueing": _beyond_median((t["queue"][1] - t["queue"][0]).astype(float)),
        "cold_start": np.where(first, np.maximum(lat - np.median(lat[first]), 0.0), 0.0),
        "network": _beyond_median(client - lat),
    }


def tail_shares(scenario: str, requests: int, seed: int, **options) -> dict[str, float]:
    """Each mechanism's share of the tail excess in the run the diagnosis sees (same config)."""
    sim = simulate(scenario_config(scenario, requests, seed, **options))
    t = sim.times
    end = t["root"][1]
    start = t["client"][0] if options.get("topology") == "queue-worker" else t["root"][0]
    split = tail_split((end - start).astype(np.int64))
    client_split = tail_split((t["client"][1] - t["client"][0]).astype(np.int64))
    added = added_time(sim)
    return {
        cause: round(excess_share(values, client_split if cause == "network" else split), 3)
        for cause, values in added.items()
    }
