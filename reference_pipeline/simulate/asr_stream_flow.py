"""The run of the blind family `asr-stream` (asr_stream.py): utterances, their chunks' route through
the gateway to the decoders, each decoder's micro-batches, the finalizations (phrase hints over Redis,
rescoring, punctuation) and the gateway's commit and final write, in time order."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reference_pipeline.simulate.asr_stream_decoder import (
    Chunk,
    GpuHost,
    Redis,
    Wal,
    cfs_throttles,
    device_syncs,
    gc_pauses,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)

# customer, share of the streams, phrase hints in its custom vocabulary
CUSTOMERS = (("acme-insurance", 0.20, 48_000), ("northwind-bank", 0.18, 36_000),
             ("globex-retail", 0.15, 30_000), ("bluepeak-logistics", 0.12, 3_500),
             ("ledgerline-crm", 0.10, 2_500), ("tenant-0417", 0.07, 1_500),
             ("tenant-0862", 0.06, 900), ("tenant-1290", 0.06, 1_200), ("tenant-2051", 0.06, 600))
LARGE_HINTS = 20_000
NOISY, SLOW_READER = "bluepeak-logistics", "ledgerline-crm"
TTL = 300 * NS_PER_S
CHUNK_S = 0.1
STEADY_MEAN_S = 4.0 * math.exp(0.55 ** 2 / 2)
FINALIZE_THREADS = 4
DOWN_S = 6.0


@dataclass
class Segment:
    """A stream's stay on one decoder process: opened, ended, its chunks; `moved` when a drain ended
    it (the gateway re-opened the stream on the next host, which re-decodes the audio so far)."""

    host: int
    fresh: bool
    opened: float
    ended: float = 0.0
    chunks: list[Chunk] = field(default_factory=list)
    moved: bool = False


@dataclass
class Utterance:
    start: float
    duration: float
    customer: str
    phrases: int
    beam: int
    gw: int
    read_every: float  # a slow reader's gap between reads of its results (0: reads promptly)
    sent: list[float] = field(default_factory=list)  # chunks' arrivals at the gateway
    segments: list[Segment] = field(default_factory=list)
    half_close: float = 0.0  # at the gateway
    half_close_dec: float = 0.0
    # the finalization at the decoder
    fin_start: float = 0.0
    hints: tuple[float, float] = (0.0, 0.0)
    hint_hit: bool = True
    redis: tuple[float, float] | None = None
    rescore: tuple[float, float] = (0.0, 0.0)
    punct: tuple[float, float] = (0.0, 0.0)
    fin_end: float = 0.0
    # back at the gateway
    eou: tuple[float, float] = (0.0, 0.0)
    insert: tuple[float, float] = (0.0, 0.0)
    end: float = 0.0

    @property
    def words(self) -> int:
        return max(1, int(2.6 * self.duration))


@dataclass
class Run:
    utterances: list[Utterance]
    hosts: list[GpuHost]
    gc: list[list[tuple[float, float, str]]]
    fresh_hosts: tuple[int, ...]
    run_ns: float


def _ring(rng: random.Random, n: int, hot: int | None) -> list[float]:
    weights = [1.0 + rng.uniform(-0.12, 0.12) for _ in range(n)]
    if hot is not None:
        weights[hot] *= 2.15  # the hot host's virtual nodes counted twice over on the ring
    total = sum(weights)
    return [w / total for w in weights]


def _pick(rng: random.Random, shares: list[float]) -> int:
    x, acc = rng.random(), 0.0
    for h, w in enumerate(shares):
        acc += w
        if x < acc:
            return h
    return len(shares) - 1


def simulate(s: dict[str, Any], parts: set[str], requests: int, seed: int, hot: int, sync_host: int) -> Run:
    rng = random.Random(seed * 1_000_033 + 3030)
    n_hosts = s["decoders"]
    mean_s = STEADY_MEAN_S * (2.75 if "long-utterances" in parts else 1.0)
    rps = s["rps"] * STEADY_MEAN_S / mean_s  # as many lines: longer utterances come less often
    starts = poisson_arrivals(rng, rps, requests)
    run_ns = requests / rps * NS_PER_S
    horizon = starts[-1] + 60 * NS_PER_S
    shares = _ring(rng, n_hosts, hot if "hash-skew" in parts else None)
    drains = ({h: (0.12 + 0.75 * h / n_hosts) * run_ns for h in range(n_hosts)}
              if "rolling-deploy" in parts else {})
    hosts = []
    for h in range(n_hosts):
        syncs = device_syncs(rng, horizon, 40.0, 100.0)  # the odd allocator retry
        if "cudafree-sync" in parts and h == sync_host:
            syncs += device_syncs(rng, horizon, 1.1, 170.0)
        throttle = cfs_throttles(rng, horizon, 0.55, (20.0, 70.0)) if "cfs-throttling" in parts else (
            cfs_throttles(rng, horizon, 0.02, (2.0, 10.0)))
        cold = drains[h] + DOWN_S * NS_PER_S if h in drains else None
        hosts.append(GpuHost(s["interval_ms"] * NS_PER_MS, Stalls(merge_intervals(syncs)),
                             Stalls(merge_intervals(throttle)), s["threads"], cold))
    gc = [gc_pauses(rng, horizon, "humongous-gc" in parts) for _ in range(s["gateways"])]
    gc_stalls = [Stalls([(a, b) for a, b, _ in pauses]) for pauses in gc]
    weights = [w for _, w, _ in CUSTOMERS]
    utts = []
    for t0 in starts:
        name, _, phrases = CUSTOMERS[_pick(rng, weights)]
        dur = min(25.0, max(0.8, mean_s / math.exp(0.55 ** 2 / 2) * rng.lognormvariate(0.0, 0.55)))
        beam = 8
        if "noisy-lines" in parts and name == NOISY:
            beam = rng.choice((24, 28, 32))
        elif rng.random() < 0.05:
            beam = rng.choice((12, 16))
        read = 0.0
        if "slow-readers" in parts and name == SLOW_READER:
            read = rng.uniform(0.3, 1.2) * NS_PER_S
        elif rng.random() < 0.01:
            read = rng.uniform(0.01, 0.06) * NS_PER_S
        u = Utterance(t0, dur, name, phrases, beam, rng.randrange(s["gateways"]), read)
        _route(rng, u, gc_stalls[u.gw], shares, drains, hosts)
        utts.append(u)
    for h, host in enumerate(hosts):
        streams = {i: seg.chunks for i, u in enumerate(utts) for seg in u.segments if seg.host == h}
        for i, chunks in streams.items():
            for c in chunks:
                c.utt = i
        host.run(rng, streams)
    _finalize(rng, utts, hosts, parts, run_ns)
    _gateway(rng, utts, gc_stalls, parts, run_ns)
    fresh = tuple(sorted(drains))
    return Run(utts, hosts, gc, fresh, run_ns)


def _settle(stalls: Stalls, t: np.ndarray) -> np.ndarray:
    """Stalls.settle over an array of times."""
    if not stalls.starts:
        return t
    starts, ends = np.asarray(stalls.starts), np.asarray(stalls.ends)
    k = np.searchsorted(starts, t, side="right") - 1
    inside = (k >= 0) & (t < ends[np.maximum(k, 0)])
    return np.where(inside, ends[np.maximum(k, 0)], t)


def _route(rng: random.Random, u: Utterance, gc: Stalls, shares: list[float], drains: dict[int, float],
           hosts: list[GpuHost]) -> None:
    """The chunks' way: client -> gateway (its JVM's pauses hold the event loop) -> the stream's decoder
    by consistent hash; a drained host's streams move to the next host on the ring."""
    n = len(shares)

    def up(h: int, t: float) -> bool:
        return h not in drains or not drains[h] <= t < drains[h] + DOWN_S * NS_PER_S

    def successor(h: int, t: float) -> int:  # the next virtual node's host: spread over the ring
        others = [shares[k] if k != h and up(k, t) else 0.0 for k in range(n)]
        return _pick(rng, [w / sum(others) for w in others])

    host = _pick(rng, shares)
    opened = gc.settle(u.start + lognormal_ms(rng, 1.5, 0.3))
    if not up(host, opened):
        host = successor(host, opened)
    seg = Segment(host, hosts[host].cold_from is not None and opened >= hosts[host].cold_from, opened)
    u.segments.append(seg)
    count = max(1, math.ceil(u.duration / CHUNK_S - 1e-9))
    nrng = np.random.default_rng(rng.getrandbits(32))
    audio = np.minimum(CHUNK_S * np.arange(1, count + 1), u.duration) * NS_PER_S + u.start
    got = np.maximum.accumulate(audio + 3.0 * NS_PER_MS * nrng.lognormal(0.0, 0.5, count))
    at_dec = _settle(gc, got) + 0.5 * NS_PER_MS * nrng.lognormal(0.0, 0.2, count)
    u.sent = got.tolist()
    cut = drains.get(host)
    moved = int(np.searchsorted(at_dec, cut)) if cut is not None and cut > opened else count
    arrivals = at_dec.tolist()
    seg.chunks = [Chunk(0, k, arrivals[k], u.beam) for k in range(moved)]
    if moved == 0:  # drained before its first chunk: the stream opens on the next host
        u.segments.clear()
    if moved < count:
        seg.ended, seg.moved = cut + lognormal_ms(rng, 0.5, 0.3), True
        nxt = successor(host, cut)
        seg = Segment(nxt, hosts[nxt].cold_from is not None and cut >= hosts[nxt].cold_from,
                      seg.ended + lognormal_ms(rng, 2.0, 0.3))
        u.segments.append(seg)
        first = max(arrivals[moved], seg.opened + lognormal_ms(rng, 0.5, 0.3))
        seg.chunks = [Chunk(0, moved, first, u.beam, rebuild=moved)]
        seg.chunks += [Chunk(0, k, max(first, arrivals[k]), u.beam) for k in range(moved + 1, count)]
    prev = u.sent[-1]
    u.half_close = gc.settle(prev + lognormal_ms(rng, 0.3, 0.3))
    u.half_close_dec = max(u.half_close + lognormal_ms(rng, 0.5, 0.3), seg.chunks[-1].arrive)


def _finalize(rng: random.Random, utts: list[Utterance], hosts: list[GpuHost], parts: set[str],
              run_ns: float) -> None:
    """Each utterance's finalization once its last chunk is decoded, in time order (the Redis primary
    and each decoder's finalization threads are shared): phrase hints (a cache hit, or HGETALL and a
    compile), LM rescoring of the n-best (CPU), punctuation (a small model on the GPU)."""
    for u in utts:
        u.fin_start = max(u.half_close_dec, u.segments[-1].chunks[-1].done)
    redis = Redis()
    threads = [[0.0] * FINALIZE_THREADS for _ in hosts]
    caches: list[dict[str, tuple[float, float]]] = []
    for _h in hosts:
        cache = {}
        for name, _, phrases in CUSTOMERS:
            loaded = -rng.uniform(0.0, TTL)
            if "hint-cache-expiry" in parts and phrases >= LARGE_HINTS:
                loaded = 0.45 * run_ns - TTL  # loaded together at the last deploy: they expire together
            cache[name] = (loaded, loaded + TTL)
        caches.append(cache)
    for u in sorted(utts, key=lambda x: x.fin_start):
        h = u.segments[-1].host
        host, pool, cache = hosts[h], threads[h], caches[h]
        free = min(pool)
        pool.remove(free)
        t = host.cpu_stalls.settle(max(u.fin_start + lognormal_ms(rng, 0.05, 0.3), free))
        valid_from, expires = cache[u.customer]
        h0 = t
        if valid_from <= t < expires:
            t += lognormal_ms(rng, 0.03, 0.3)
            u.hint_hit, u.redis = True, None
        else:
            r0 = t + lognormal_ms(rng, 0.02, 0.3)
            r1 = redis.call(rng, r0, u.phrases)
            u.hint_hit, u.redis = False, (r0, r1)
            t = host.cpu_stalls.run(r1, 0.012 * u.phrases * NS_PER_MS * rng.lognormvariate(0.0, 0.2))
            if not valid_from <= t < expires:
                cache[u.customer] = (t, t + TTL)
        u.hints = (h0, t)
        r_s = t + lognormal_ms(rng, 0.02, 0.3)
        cost = (6.0 + 3.4 * u.duration) * (u.beam / 8.0) * NS_PER_MS * rng.lognormvariate(0.0, 0.15)
        u.rescore = (r_s, host.cpu_stalls.run(r_s, cost))
        p_s = u.rescore[1] + lognormal_ms(rng, 0.03, 0.3)
        p_cost = (2.0 + 0.08 * u.words) * NS_PER_MS * rng.lognormvariate(0.0, 0.15)
        u.punct = (p_s, host.gpu_stalls.run(p_s, p_cost))
        u.fin_end = host.cpu_stalls.settle(u.punct[1] + lognormal_ms(rng, 0.05, 0.3))
        pool.append(u.fin_end)


def _gateway(rng: random.Random, utts: list[Utterance], gc: list[Stalls], parts: set[str],
             run_ns: float) -> None:
    """The final result back at the gateway, in time order: the transcript's INSERT (synchronous
    commit: WAL group commit), then the final message written to the client's stream, which waits for
    flow-control window a slow reader has not yet returned."""
    backup = (0.15 * run_ns, 0.85 * run_ns) if "wal-fsync-stalls" in parts else None
    wal = Wal(random.Random(rng.random()), backup)
    for u in utts:
        u.eou = (u.half_close, 0.0)
    order = sorted(utts, key=lambda x: x.fin_end)
    for u in order:
        stalls = gc[u.gw]
        got = stalls.settle(u.fin_end + lognormal_ms(rng, 0.3, 0.3))
        i_s = stalls.settle(got + lognormal_ms(rng, 0.15, 0.3))
        durable = wal.commit(i_s + lognormal_ms(rng, 0.35, 0.3)) + lognormal_ms(rng, 0.25, 0.3)
        i_e = stalls.settle(durable)
        u.insert = (i_s, i_e)
        write = i_e + lognormal_ms(rng, 0.1, 0.3)
        if u.read_every:
            write += rng.random() * u.read_every  # the window reopens at the client's next read
        write = stalls.settle(write)
        u.eou = (u.half_close, write)
        u.end = stalls.settle(write + lognormal_ms(rng, 0.08, 0.3))
