"""The request flow of the blind family `feed-ranker` (feed_ranker.py): arrivals spread over the pods,
each request's timeline through Envoy, a Tomcat thread, Cassandra, the feature cache, the model, the
ads call and the Kafka producer, on a JVM that pauses when G1 says and a sidecar that stops when its
CFS quota is spent."""

from __future__ import annotations

import math
import random
from typing import Any

from reference_pipeline.simulate.feed_ranker_model import (
    MB,
    CaffeineCache,
    Call,
    CassandraRing,
    Request,
    ads_blend_ns,
    ads_episodes,
    candidate_ids,
    cfs_stalls,
    first_request_ns,
    g1_pauses,
    jit_factor,
    pods_of,
    retransmit_ns,
)
from reference_pipeline.simulate.feed_ranker_spans import Writer
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    TraceTable,
    WorkerPool,
    lognormal_ms,
    poisson_arrivals,
)

UNIVERSE, HOT, TTL_S = 20_000, 19_800, 600.0
THREADS, TREES, BATCH, PAGE, CHUNK = 16, 800, 128, 500, 64
TREE_ROW_NS = 80.0  # one tree walked for one candidate
SIDECAR_QUOTA_MS = 10.0  # a 100m limit


def _candidates(rng: random.Random, t: float, horizon: float, parts: set[str]) -> tuple[str, int, int]:
    """(surface, candidate count, features per candidate) of one request."""
    if "more-candidates" in parts and t >= 0.3 * horizon and rng.random() < 0.7:
        big = "g1-humongous" in parts
        return (
            "explore",
            max(40, round(rng.lognormvariate(0.0, 0.3) * (1100 if big else 500))),
            1024 if big else 256,
        )
    return "home", max(20, round(rng.lognormvariate(0.0, 0.35) * 150)), 256


def _allocation(t: float, n: int, features: int) -> tuple[float, float, float]:
    """(time, young MB, humongous MB) a request allocates: objects per candidate, and its feature
    matrix, leaf-index and score arrays, humongous past half a 4 MB region."""
    matrix = n * features * 4 / MB
    young = 2.0 + 0.04 * n
    if matrix > 2.0:
        return t, young, 3 * matrix
    return t, young + 3 * matrix, 0.0


def simulate(
    rng: random.Random, table: TraceTable, parts: set[str], requests: int, seed: int, s: dict[str, Any]
) -> TraceTable:
    arrivals = poisson_arrivals(rng, s["rps"], requests)
    horizon = arrivals[-1]
    base = s["pods"]
    fresh_at = 0.4 * horizon if "fresh-pod-jit" in parts else None
    count = base + (fresh_at is not None)
    # a rolling deploy (maxSurge 1, maxUnavailable 0): once the new pod is ready, pod 0 is terminated
    pod_of = [rng.randrange(base) for _ in arrivals]
    if fresh_at is not None:
        pod_of = [base if k == 0 and t >= fresh_at else k for k, t in zip(pod_of, arrivals, strict=True)]
    shapes = [_candidates(rng, t, horizon, parts) for t in arrivals]

    per_pod: list[list[int]] = [[] for _ in range(count)]
    for i, k in enumerate(pod_of):
        per_pod[k].append(i)
    leak = 110.0 if "g1-mixed-gc" in parts else 3.0
    trigger = 250.0 if "g1-humongous" in parts else None
    pauses = [
        g1_pauses(
            rng,
            [_allocation(arrivals[i] + 20 * NS_PER_MS, shapes[i][1], shapes[i][2]) for i in mine],
            horizon + 10 * NS_PER_S,
            leak,
            trigger,
        )
        for mine in per_pod
    ]
    app_stalls = [Stalls([(p.start, p.end) for p in mine]) for mine in pauses]
    pause_ends = [[p.end for p in mine] for mine in pauses]
    if "sidecar-throttling" in parts:
        rate = s["rps"] / base * 0.1  # requests per period and pod
        per_request = (0.88 * SIDECAR_QUOTA_MS - 1.0) / rate
        side_stalls = [
            Stalls(
                cfs_stalls(
                    rng,
                    [arrivals[i] for i in mine],
                    horizon + 10 * NS_PER_S,
                    SIDECAR_QUOTA_MS,
                    per_request,
                    1.0,
                )
            )
            for mine in per_pod
        ]
    else:
        side_stalls = [Stalls([]) for _ in range(count)]

    wave_at = 0.35 * horizon if "caffeine-expiry-wave" in parts else None
    caches = [
        CaffeineCache(
            rng,
            HOT,
            TTL_S,
            fresh_at if k == base else (wave_at - TTL_S * NS_PER_S if wave_at is not None else None),
        )
        for k in range(count)
    ]
    ring = CassandraRing(rng, (2,) if "cassandra-slow-replica" in parts else ())
    ads_slow = "ads-blender-slow" in parts
    episodes = ads_episodes(rng, horizon) if ads_slow else []
    lossy = {k for k in range(count) if k % 3 == 2} if "az-retransmits" in parts else set()
    pools = [WorkerPool(THREADS) for _ in range(count)]
    flush = [-math.inf] * count
    served = [0] * count
    writer = Writer(table, rng, s["style"], pods_of(seed, count), s["sidecar_traced"], s["gc_report"])

    for i, t0 in enumerate(arrivals):
        k = pod_of[i]
        app, side = app_stalls[k], side_stalls[k]
        surface, n, _features = shapes[i]
        jit = jit_factor(served[k]) if fresh_at is not None and k == base else 1.0
        warmup = first_request_ns(rng, served[k]) if fresh_at is not None and k == base else 0.0
        served[k] += 1

        def cpu(ms: float, sigma: float = 0.25, jit: float = jit) -> float:
            return lognormal_ms(rng, ms * jit, sigma)

        def call(
            start: float, own: float, instance: int, k: int = k, app: Stalls = app, side: Stalls = side
        ) -> Call:
            envoy_start = side.settle(start + lognormal_ms(rng, 0.04, 0.3))
            sent = side.run(envoy_start, lognormal_ms(rng, 0.06, 0.3))
            server_start = sent + lognormal_ms(rng, 0.25, 0.3) + retransmit_ns(rng, k in lossy)
            server_end = server_start + own
            back = server_end + lognormal_ms(rng, 0.25, 0.3) + retransmit_ns(rng, k in lossy)
            envoy_end = side.run(side.settle(back), lognormal_ms(rng, 0.05, 0.3))
            end = app.settle(envoy_end + lognormal_ms(rng, 0.03, 0.3))
            return Call(start, envoy_start, envoy_end, server_start, server_end, end, instance)

        inbound_start = side.settle(t0)
        forwarded = side.run(inbound_start, lognormal_ms(rng, 0.12, 0.3))
        h0 = app.settle(pools[k].acquire(forwarded + lognormal_ms(rng, 0.05, 0.3)))
        t = app.run(h0, cpu(0.15) + warmup)

        c0, specs, coordinator = t, 0, 0
        partition = rng.randrange(1_000_000)
        for page in range(math.ceil(n / PAGE)):  # each page a round trip through Envoy's TCP proxy
            rows = min(PAGE, n - page * PAGE)
            d, coordinator, spec = ring.read(partition, rows)
            sent = side.settle(t) + lognormal_ms(rng, 0.2, 0.3) + retransmit_ns(rng, k in lossy)
            t = side.settle(sent + d + lognormal_ms(rng, 0.2, 0.3) + retransmit_ns(rng, k in lossy))
            specs += spec
        c1 = app.settle(t + cpu(0.002 * n))
        cql_attrs = {
            "db.cassandra.consistency_level": "LOCAL_QUORUM",
            "db.cassandra.page_size": PAGE,
            "db.cassandra.coordinator.id": ring.host_ids[coordinator],
            "db.cassandra.coordinator.dc": "us-east",
            "db.cassandra.speculative_execution_count": specs,
            "db.response.returned_rows": n,
        }

        hy0 = app.run(c1, cpu(0.03))
        t = app.run(hy0, cpu(0.004 * n))
        ids = candidate_ids(rng, n, UNIVERSE)
        misses = caches[k].misses(ids, t)
        feature_calls = []
        for a in range(0, len(misses), CHUNK):
            chunk = len(misses) - a if len(misses) - a < CHUNK else CHUNK
            own = lognormal_ms(rng, 3.0, 0.3) + chunk * lognormal_ms(rng, 0.25, 0.15)
            c = call(t, own, rng.randrange(3))
            c.attrs = {"featurestore.keys": chunk}
            feature_calls.append(c)
            t = app.run(c.end, cpu(0.02))
        caches[k].fill(misses, t)
        hy1 = app.run(t, cpu(0.01 * len(misses)))

        r0 = app.run(hy1, cpu(0.05))
        t, batches = r0, []
        for b in range(0, n, BATCH):
            size = min(BATCH, n - b)
            b1 = app.run(t, size * TREES * TREE_ROW_NS * jit * rng.lognormvariate(0.0, 0.08))
            batches.append((t, b1, size))
            t = app.run(b1, cpu(0.02))
        r1 = app.run(t, cpu(0.3))

        a0 = app.run(r1, cpu(0.1))
        ads = call(a0, ads_blend_ns(rng, a0, ads_slow, episodes), rng.randrange(3))
        p0 = app.run(ads.end, cpu(0.08))
        if p0 >= flush[k]:
            flush[k] = p0 + 10 * NS_PER_MS  # linger.ms: the batch goes when the first record is 10 ms old
        acked = flush[k] + lognormal_ms(rng, 5.0, 0.4) + retransmit_ns(rng, k in lossy)
        produced = app.settle(side.settle(acked))
        items = 30
        h1 = app.run(p0 + lognormal_ms(rng, 0.05, 0.3), cpu(0.6 + 0.02 * items))
        pools[k].release(h1)
        out = side.run(side.settle(h1 + lognormal_ms(rng, 0.05, 0.3)), lognormal_ms(rng, 0.1, 0.3))
        writer.request(
            Request(
                k,
                (inbound_start, out),
                (h0, h1),
                (c0, c1),
                cql_attrs,
                (hy0, hy1),
                n - len(misses),
                len(misses),
                feature_calls,
                (r0, r1),
                batches,
                ads,
                (p0, produced),
                n,
                surface,
                items,
            ),
            pauses[k],
            pause_ends[k],
        )
    return table
