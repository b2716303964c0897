"""Blind family `feed-ranker`: a mobile feed service in Java ranking Cassandra candidates with an
in-process GBM model, with an Istio sidecar on every pod.

Shape: `feed-api` (Spring Boot on Tomcat, 16 worker threads per pod, 3-4 pods over three zones;
JDK 21, G1 on a 4 GB heap with 4 MB regions) serves `GET /api/v1/feed`: the candidate ids from
Cassandra (`SELECT feed.candidates_by_user`, LOCAL_QUORUM, one CQL span per request, 500-row pages),
per-candidate features from an in-process Caffeine cache (expire-after-write 10 min) over the gRPC
`featurestore.v2.FeatureStore/BatchGet` of `feature-store` (only for the misses, 64 ids a call),
`FeedRanker.rank` (LightGBM, 800 trees, `lightgbm.predict_batch` per 128 candidates: time grows with
candidates x trees), `POST /v1/blend` on `ads-blender`, then an impression event produced to Kafka
(`linger.ms=10`, acks=all: the PRODUCER span ends when its batch is acknowledged, often after the
response), then the JSON response. Envoy (`feed-api.feed`) proxies every request in and every call out.

Conventions by seed (mod 3): 0: OTLP/JSON, new semantic conventions, the app's instance is its
`service.instance.id` (a UUID; `k8s.pod.name` beside it), the Envoy spans traced, GC reported as
`jvm.gc` span events on the request span; 1: Jaeger JSON, older conventions (`http.method`,
`net.peer.name`, HTTP client spans named `HTTP POST`), processes named by `hostname`, no Envoy spans,
GC reported as `jvm.gc.pause.*.delta` attributes on the request span; 2: Zipkin v2 (Brave/Sleuth tags,
lower-case names, instances are endpoints ip:port, the sidecar on port 15006), Envoy spans traced, GC
not reported. Load 95 / 130 / 80 requests/s over 3 / 4 / 3 pods.

Healthy noise: young G1 pauses every second or two (6 ms median, from what requests allocate), a few
per mille of cache misses (the long tail and entries expiring one by one: a feature call on about
half the requests), Cassandra reads at ~2 ms with speculative retries past 12 ms, ads auctions with a
rare slow one, log-normal jitter everywhere, producer batches.

Mechanisms (scenario: truth):

- `g1-mixed-gc`: old-generation growth (promotion of 110 MB per young pause) brings marking cycles and
  mixed collections of 60-200 ms; every span in flight on the pod stretches, requests queue for a
  thread behind the pause. Truth gc_pause at feed-api, every pod (side: queueing).
- `cassandra-slow-replica`: one of six nodes compacting. A quorum read completes at the second answer,
  so the slow node as a second replica costs little (the snitch avoids it, the speculative retry
  bounds it); as coordinator (a third of the reads of its partitions) it is slow. The CQL span has
  `db.cassandra.coordinator.id`. Truth slow_dependency at the CQL span (stage feature_hydration).
- `caffeine-expiry-wave`: the pods were warmed at deploy one TTL before a third of the run; the hot
  set expires at once, and each pod's requests miss until refilled: feature calls of up to 64 ids, in
  series. Truth cache_miss at `FeatureHydrator.hydrate` (side: slow_dependency and large_payload: the
  feature call grows with the ids it asks for).
- `ads-blender-slow`: the ads-blending service degrades (45 ms median, 700 ms in three
  episodes of 4-6 % of the run); the
  calls hold Tomcat threads, so inside the episodes requests wait for a thread before the handler
  starts (seen where Envoy's inbound span is traced). A fix is at the ads call: truth
  slow_dependency at the ads CLIENT span (stage downstream; side: queueing).
- `more-candidates`: a product change at 30 % of the run gives 70 % of requests the `explore` surface
  with 500 candidates instead of 150; ranking grows with `feed.candidates.count`. Truth compute_bound
  at `FeedRanker.rank` (model_forward); accept large_payload: the time that grows with the item count
  is the model's compute itself, both names describe it.
- `fresh-pod-jit`: a rolling deploy replaces one pod at 40 % of the run; the new pod (its cache
  warmed at start) runs its first requests interpreted and lazily initialised (600 ms on the first
  three; the scoring (a pure-Java evaluator, JPMML-like) and JSON paths 13x slower, decaying over ~80
  requests as C1 then C2 compile them). Truth cold_start on that pod.
- `az-retransmits`: packet loss in us-east-1c: 3 % of the segments of its pods' calls wait for a
  retransmission timeout (200 ms, tripled on a second loss), between the calling span and the callee's
  SERVER span; the callees are fine. Truth network at the ads call on the zone's pods (the Envoy
  outbound span of the sidecar where traced: its SERVER child is the callee).
- `sidecar-throttling`: the sidecar's CPU limit set to 100m (10 ms per 100 ms period) against its
  measured mean (~88 % of it: mTLS and the stats filter cost 1-3 ms per request): in busy periods
  Envoy stops until the next period, so its spans (and the app's calls through it) end on 100 ms
  boundaries; the app's own spans are fine. Truth cpu_throttling at the sidecar's inbound span where
  traced (stage ingress), else at feed-api's ads call (the only spans it stretches there).

Two causes: `more-candidates+g1-humongous` (the explore surface with 1100 candidates and 1024 features:
3 humongous arrays a request, `G1 Humongous Allocation` pauses, some evacuation failures: compute_bound
and gc_pause), `cassandra-slow-replica+caffeine-expiry-wave`, `sidecar-throttling+az-retransmits`
(both open gaps between a call and its callee: stalls that end on period boundaries on every pod,
RTO-long gaps on the zone's pods), `g1-mixed-gc+fresh-pod-jit` (the leak on every JVM; the new one
starts with an empty old generation).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.feed_ranker_flow import simulate
from reference_pipeline.simulate.feed_ranker_model import labels, pods_of
from reference_pipeline.simulate.feed_ranker_spans import (
    ADS_CALL,
    APP,
    CQL,
    HYDRATE,
    INBOUND,
    OUTBOUND,
    RANK,
    SIDECAR,
)
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "feed-ranker"
SINGLE = (
    "g1-mixed-gc",
    "cassandra-slow-replica",
    "caffeine-expiry-wave",
    "ads-blender-slow",
    "more-candidates",
    "fresh-pod-jit",
    "az-retransmits",
    "sidecar-throttling",
)
PAIRS = (
    "more-candidates+g1-humongous",
    "cassandra-slow-replica+caffeine-expiry-wave",
    "sidecar-throttling+az-retransmits",
    "g1-mixed-gc+fresh-pod-jit",
)
SCENARIOS = ("steady", *SINGLE, *PAIRS)
PODS = (3, 4, 3)
RPS = (95.0, 130.0, 80.0)


def setup(seed: int) -> dict[str, Any]:
    style = seed % 3
    return {
        "style": style,
        "fmt": ("otlp-json", "jaeger", "zipkin")[style],
        "pods": PODS[style],
        "rps": RPS[style],
        "sidecar_traced": style != 1,
        "gc_report": ("events", "metrics", "none")[style],
    }


def lossy(pods: int) -> list[int]:
    """The pods in us-east-1c (pod k runs in zone k mod 3)."""
    return [k for k in range(pods) if k % 3 == 2]


def _name(name: str, style: int) -> str:
    return name.lower() if style == 2 else name


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s = setup(seed)
    style, n, traced = s["style"], s["pods"], s["sidecar_traced"]
    pods = pods_of(seed, n + 1)
    app, side = labels(style, pods, False), labels(style, pods, True)
    every = tuple(app[:n])
    ads = _name(ADS_CALL[style], style)
    causes = {
        "g1-mixed-gc": Cause("gc_pause", None, None, APP, every, side=("queueing",)),
        "g1-humongous": Cause("gc_pause", None, None, APP, every, side=("queueing",)),
        "cassandra-slow-replica": Cause(
            "slow_dependency", "feature_hydration", _name(CQL, style), APP, every
        ),
        "caffeine-expiry-wave": Cause(
            "cache_miss",
            "feature_hydration",
            _name(HYDRATE, style),
            APP,
            every,
            side=("slow_dependency", "large_payload"),
        ),
        "ads-blender-slow": Cause("slow_dependency", "downstream", ads, APP, every, side=("queueing",)),
        "more-candidates": Cause(
            "compute_bound", "model_forward", _name(RANK, style), APP, every, accept=("large_payload",)
        ),
        "fresh-pod-jit": Cause("cold_start", None, None, APP, (app[n],)),
        "az-retransmits": (
            Cause(
                "network",
                "downstream",
                _name(OUTBOUND["ads-blender"], style),
                SIDECAR,
                tuple(side[k] for k in lossy(n)),
            )
            if traced
            else Cause("network", "downstream", ads, APP, tuple(app[k] for k in lossy(n)))
        ),
        "sidecar-throttling": (
            Cause("cpu_throttling", "ingress", _name(INBOUND, style), SIDECAR, tuple(side[:n]))
            if traced
            else Cause("cpu_throttling", "downstream", ads, APP, every)
        ),
    }
    if scenario == "steady":
        return ()
    out = [causes[part] for part in scenario.split("+")]
    if "fresh-pod-jit" in scenario:  # the new pod takes over from pod 0 at 40 % of the run
        out = [
            c
            if c.pattern == "cold_start"
            or not c.instances
            or c.service not in (APP, SIDECAR)
            or len(c.instances) < n
            else Cause(
                c.pattern,
                c.stage,
                c.span,
                c.service,
                (*c.instances, (app if c.service == APP else side)[n]),
                c.accept,
                c.side,
            )
            for c in out
        ]
    return tuple(out)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    rng = random.Random(seed * 1_000_003 + 0xFEED)
    return simulate(rng, TraceTable(seed, 0xFEED), set(scenario.split("+")), requests, seed, s)
