"""The discrete-event model of one run: every request's stage timings, on a simulated clock.

Requests arrive open-loop, a load balancer spreads them over server processes, and each process is
simulated on its own, one stage at a time over all its requests in the order they reach that stage.
That is exact for this service because no resource is shared between stages of a process: the
feature cache and the store's connection pool belong to hydration, the batcher to the queue and the
forward pass, the score monitor's lock to postprocessing. The stages that hold shared state are
loops (cache, batcher, lock); the rest is vectorised. Garbage-collection pauses are applied
afterwards by mapping process time to wall time (see processes.py).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from reference_pipeline.simulate.config import SimConfig
from reference_pipeline.simulate.processes import (
    NS_PER_MS,
    NS_PER_S,
    Process,
    arrivals,
    gc_pauses,
    lognormal,
    route,
    server_processes,
)

# Span roles in the order a request's spans are written; `model.Simulation.times` has each one's
# (start, end) in wall-clock nanoseconds since the epoch.
ROLES = ("client", "root", "receive", "parse", "hydrate", "store_get", "tokenize", "queue", "forward",
         "postprocess", "lock_wait", "downstream", "ds_server", "serialize")
GAPS = 9  # scheduling gaps: between the root's children, and before the response leaves


@dataclass
class Simulation:
    """Per-request arrays (index = request, in send order) plus the processes they ran on."""

    config: SimConfig
    processes: list[Process]
    client: np.ndarray
    process: np.ndarray
    ds_instance: np.ndarray
    times: dict[str, tuple[np.ndarray, np.ndarray]]  # role -> (start_ns, end_ns), int64 since the epoch
    has_downstream: np.ndarray
    chars: np.ndarray
    tokens: np.ndarray
    body_bytes: np.ndarray
    entity: np.ndarray
    cache_hit: np.ndarray  # a miss reads the feature store (a feature_store.get span)
    batch_size: np.ndarray
    queue_depth: np.ndarray
    leader: np.ndarray  # request whose forward span opens the batch
    gc_events: dict[int, list[tuple[int, int, int, int]]] = field(default_factory=dict)
    # request -> [(timestamp_ns, generation, duration_ns, collected)]

    @property
    def n(self) -> int:
        return len(self.client)


def _zipf(rng: np.random.Generator, n_keys: int, s: float, size: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n_keys + 1) ** s
    cdf = np.cumsum(weights) / weights.sum()
    return np.minimum(np.searchsorted(cdf, rng.random(size)), n_keys - 1)


class _Draws:
    """Every per-request random quantity, drawn up front in a fixed order (determinism per seed)."""

    def __init__(self, rng: np.random.Generator, c: SimConfig) -> None:
        n = c.requests
        self.send = arrivals(rng, c)
        self.client = rng.integers(0, c.clients, n)
        slow = self.client < c.slow_clients
        self.net_in = np.where(slow, lognormal(rng, c.slow_net_ms, n), lognormal(rng, c.net_ms, n))
        self.net_out = np.where(slow, lognormal(rng, c.slow_net_ms, n), lognormal(rng, c.net_ms, n))
        self.chars = np.clip(np.rint(rng.lognormal(np.log(c.text_chars[0]), c.text_chars[1], n)), 8, 8000)
        self.entity = _zipf(rng, c.entities, c.zipf_s, n)
        noise = rng.lognormal(0.0, c.stage_sigma, (4, n))
        self.body_bytes = self.chars + 180 + rng.integers(0, 40, n)
        self.receive = (c.receive_ms + c.receive_per_kb_ms * self.body_bytes / 1024) * NS_PER_MS * noise[0]
        self.parse = (c.parse_ms + c.parse_per_char_ms * self.chars) * NS_PER_MS * noise[1]
        self.tokenize = (c.tokenize_ms + c.tokenize_per_char_ms * self.chars) * NS_PER_MS * noise[2]
        self.serialize = c.serialize_ms * NS_PER_MS * noise[3]
        self.gaps = lognormal(rng, c.gap_ms, GAPS * n).reshape(GAPS, n)
        self.lookup = lognormal(rng, c.cache_hit_ms, n)
        self.store = lognormal(rng, c.store_ms, n)
        self.ttl_factor = 1.0 + c.cache_jitter * rng.uniform(-1.0, 1.0, n)
        self.postprocess = lognormal(rng, c.postprocess_ms, n)
        self.hold = lognormal(rng, c.lock_hold_ms, n)
        self.has_downstream = rng.random(n) < c.downstream_fraction
        self.ds_instance = rng.integers(0, c.downstream_instances, n)
        self.ds_server = lognormal(rng, c.downstream_ms, n)
        if c.downstream_pareto is not None:
            scale, alpha = c.downstream_pareto
            extra = scale * NS_PER_MS * (rng.random(n) ** (-1.0 / alpha) - 1.0)
            self.ds_server += np.minimum(extra, 5000 * NS_PER_MS)
        self.ds_net = lognormal(rng, c.downstream_net_ms, 2 * n).reshape(2, n)


def _hydrate(c: SimConfig, rng: np.random.Generator, d: _Draws, idx: np.ndarray, start: np.ndarray,
             proc: Process):
    """Cache lookups in arrival order; misses read the store through a pool of connections."""
    m = len(idx)
    end, store_start, store_end = np.empty(m), np.zeros(m), np.zeros(m)
    hit = np.zeros(m, dtype=bool)
    ttl = c.cache_ttl_s * NS_PER_S
    cache: OrderedDict[int, tuple[float, float]] = OrderedDict()
    if c.cache_prefill:  # least popular first, so the popular keys are the most recently used
        fill = min(c.cache_capacity, c.entities)
        factors = 1.0 + c.cache_jitter * rng.uniform(-1.0, 1.0, fill)
        for key, factor in zip(range(fill - 1, -1, -1), factors.tolist(), strict=True):
            cache[key] = (-np.inf, proc.accept_from + ttl * factor)
    pool = [-np.inf] * c.store_pool
    keys, lookups, stores = d.entity[idx].tolist(), d.lookup[idx].tolist(), d.store[idx].tolist()
    factors = d.ttl_factor[idx].tolist()
    starts = start.tolist()
    for j in np.argsort(start, kind="stable").tolist():
        t, key = starts[j], keys[j]
        looked = t + lookups[j]
        entry = cache.get(key)
        if entry is not None and entry[0] <= t < entry[1]:
            hit[j] = True
            cache.move_to_end(key)
            end[j] = looked
            continue
        begin = max(looked, heapq.heappop(pool))
        done = begin + stores[j]
        heapq.heappush(pool, done)
        store_start[j], store_end[j] = looked, done
        end[j] = done + lookups[j]
        cache[key] = (done, done + ttl * factors[j])
        cache.move_to_end(key)
        if len(cache) > c.cache_capacity:
            cache.popitem(last=False)
    return end, hit, store_start, store_end


def _batch(c: SimConfig, rng: np.random.Generator, enqueue: np.ndarray, cold: bool):
    """The dynamic batcher: a batch leaves when full or when its oldest member waited max_wait,
    never before the model worker is free. Returns per-request forward start/end, batch size,
    queue depth found on arrival and the batch leader's position (all in `enqueue`'s order)."""
    m = len(enqueue)
    order = np.argsort(enqueue, kind="stable")
    queued = enqueue[order].tolist()
    start, end = np.empty(m), np.empty(m)
    size = np.empty(m, dtype=np.int64)
    leader = np.empty(m, dtype=np.int64)
    noise = rng.lognormal(0.0, c.forward_sigma, m).tolist()
    wait = c.max_wait_ms * NS_PER_MS
    free, i, batch = -np.inf, 0, 0
    while i < m:
        last = i + c.max_batch - 1
        full_at = queued[last] if last < m else np.inf
        dispatch = max(free, min(full_at, queued[i] + wait))
        j = bisect_right(queued, dispatch, i, min(i + c.max_batch, m))
        duration = (c.forward_base_ms + c.forward_per_item_ms * (j - i)) * NS_PER_MS * noise[batch]
        if cold:  # lazy kernel and allocator initialisation, paid by the first batches
            duration += c.cold_forward_ms * NS_PER_MS * np.exp(-batch / c.cold_forward_decay)
        members = order[i:j]
        start[members], end[members] = dispatch, dispatch + duration
        size[members], leader[members] = j - i, order[i]
        free, i, batch = dispatch + duration, j, batch + 1
    dispatched = np.sort(start)
    depth = np.empty(m, dtype=np.int64)
    depth[order] = np.maximum(np.arange(m) - np.searchsorted(dispatched, enqueue[order], side="right"), 0)
    return start, end, size, leader, depth


def _lock(c: SimConfig, d: _Draws, idx: np.ndarray, ready: np.ndarray):
    """The score monitor's lock, FIFO; each waiter makes the hold a little longer (convoy)."""
    m = len(idx)
    acquire, release = np.empty(m), np.empty(m)
    holds = d.hold[idx].tolist()
    readies = ready.tolist()
    waiting: list[float] = []
    free = -np.inf
    for j in np.argsort(ready, kind="stable").tolist():
        t = readies[j]
        while waiting and waiting[0] <= t:
            heapq.heappop(waiting)
        got = max(t, free)
        free = got + holds[j] * (1.0 + c.lock_convoy * len(waiting))
        if got > t:
            heapq.heappush(waiting, got)
        acquire[j], release[j] = got, free
    return acquire, release


def _gc_events(events: dict, idx: np.ndarray, root_s: np.ndarray, root_e: np.ndarray, proc: Process) -> None:
    """A `python.gc` event on every root span in flight at each pause (root_s sorted ascending)."""
    pauses = proc.pauses
    longest = float((root_e - root_s).max()) if len(root_s) else 0.0
    for p in range(len(pauses.at)):
        at = pauses.at[p]
        lo, hi = np.searchsorted(root_s, [at - longest, at])
        for j in (lo + np.flatnonzero(root_e[lo:hi] > at)).tolist():
            event = (int(pauses.wall_start[p]), int(pauses.generation[p]), int(pauses.duration[p]),
                     int(pauses.collected[p]))
            events.setdefault(int(idx[j]), []).append(event)


def simulate(config: SimConfig) -> Simulation:
    """Run the model: per-request stage timings in wall-clock nanoseconds since `config.start_ns`."""
    c = config
    rng = np.random.default_rng(c.seed)
    d = _Draws(rng, c)
    n = c.requests
    arrive = d.send + d.net_in
    processes = server_processes(c)
    process = route(rng, processes, arrive)
    rel = {role: (np.zeros(n), np.zeros(n)) for role in ROLES}
    hit, batch_size, depth, leader = (np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64),
                                      np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    gc_events: dict[int, list] = {}
    for proc in processes:
        mine = np.flatnonzero(process == proc.index)
        horizon = float(arrive[mine].max()) + 30 * NS_PER_S if len(mine) else proc.accept_from
        proc.pauses = gc_pauses(rng, c, proc.accept_from, horizon)
        if not len(mine):
            continue
        tau = proc.pauses.from_wall(arrive[mine])  # arrival in process time
        order = np.argsort(tau, kind="stable")
        idx, t0 = mine[order], tau[order]
        g = d.gaps[:, idx]
        recv_e = t0 + d.receive[idx]
        parse_s = recv_e + g[0]
        parse_e = parse_s + d.parse[idx]
        hyd_s = parse_e + g[1]
        hyd_e, hits, store_s, store_e = _hydrate(c, rng, d, idx, hyd_s, proc)
        tok_s = hyd_e + g[2]
        tok_d = d.tokenize[idx]
        if not c.warm_start:  # lazy tokenizer load and cold caches, paid by the first requests
            decay = np.exp(-np.arange(len(idx)) / c.cold_tokenize_decay)
            tok_d = tok_d + c.cold_tokenize_ms * NS_PER_MS * decay
        tok_e = tok_s + tok_d
        q_s = tok_e + g[3]
        fwd_s, fwd_e, sizes, lead, depths = _batch(c, rng, q_s, cold=not c.warm_start)
        post_s = fwd_e + g[4]
        lock_s = post_s + d.postprocess[idx]
        lock_e, release = _lock(c, d, idx, lock_s)
        post_e = release + g[5]
        ds = d.has_downstream[idx]
        ds_s = post_e + g[6]
        ds_out, ds_srv, ds_back = d.ds_net[0, idx], d.ds_server[idx], d.ds_net[1, idx]
        ds_e = np.where(ds, ds_s + ds_out + ds_srv + ds_back, ds_s)
        ser_s = np.where(ds, ds_e + g[7], ds_s)
        ser_e = ser_s + d.serialize[idx]
        root_e = ser_e + g[8]
        t = dict(receive=(t0, recv_e), parse=(parse_s, parse_e), hydrate=(hyd_s, hyd_e),
                 store_get=(store_s, store_e), tokenize=(tok_s, tok_e), queue=(q_s, fwd_s),
                 forward=(fwd_s, fwd_e), postprocess=(post_s, post_e), lock_wait=(lock_s, lock_e),
                 downstream=(ds_s, ds_e), serialize=(ser_s, ser_e), root=(t0, root_e))
        for role, (s, e) in t.items():
            rel[role][0][idx] = proc.pauses.to_wall(s)
            rel[role][1][idx] = proc.pauses.to_wall(e)
        ds_wall = rel["downstream"][0][idx] + ds_out
        rel["ds_server"][0][idx], rel["ds_server"][1][idx] = ds_wall, ds_wall + ds_srv
        _gc_events(gc_events, idx, t0, root_e, proc)
        hit[idx] = hits
        batch_size[idx], depth[idx], leader[idx] = sizes, depths, idx[lead]
    rel["client"] = (d.send, rel["root"][1] + d.net_out)
    times = {role: (np.rint(s).astype(np.int64) + c.start_ns, np.rint(e).astype(np.int64) + c.start_ns)
             for role, (s, e) in rel.items()}
    events = {i: [(ts + c.start_ns, *rest) for ts, *rest in evs] for i, evs in sorted(gc_events.items())}
    return Simulation(
        config=c, processes=processes, client=d.client, process=process, ds_instance=d.ds_instance,
        times=times, has_downstream=d.has_downstream.copy(),
        chars=d.chars.astype(np.int64), tokens=np.minimum(np.ceil(d.chars / 4.5).astype(np.int64) + 2, 128),
        body_bytes=d.body_bytes.astype(np.int64), entity=d.entity, cache_hit=hit, batch_size=batch_size,
        queue_depth=depth, leader=leader, gc_events=events,
    )
