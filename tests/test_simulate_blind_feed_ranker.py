"""The held-out blind family `feed-ranker` (reference_pipeline/simulate/feed_ranker.py): it writes each of
its formats, loads through the real loader, its truth names spans, services and instances the run has,
and each planted mechanism shows in the timings the way G1, the Cassandra quorum, the Caffeine cache,
the Tomcat pool, the model, the JIT, TCP or the sidecar's CFS quota would produce it (and a steady run
of the same seed does not). No diagnosis is run here (the family was held out until its honest scores)."""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from ingest.span_json import collector_paused
from reference_pipeline.simulate import blind, feed_ranker
from reference_pipeline.simulate.feed_ranker import SCENARIOS, lossy, setup
from reference_pipeline.simulate.feed_ranker_model import labels, pods_of
from reference_pipeline.simulate.feed_ranker_spans import (
    ADS_CALL,
    ADS_SERVER,
    BATCH,
    CQL,
    FEATURE_RPC,
    HYDRATE,
    INBOUND,
    OUTBOUND,
    PRODUCE,
    RANK,
    ROOT,
)
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import seed_runs, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_feed_ranker.py::test_every_format_loads_and_the_truth_names_what_the_run_has[0]",
    "tests/test_simulate_blind_feed_ranker.py::test_every_format_loads_and_the_truth_names_what_the_run_has[1]",
    "tests/test_simulate_blind_feed_ranker.py::test_every_format_loads_and_the_truth_names_what_the_run_has[2]",
)

MS = 1e6
FAMILY = "feed-ranker"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """The run's spans as the store holds them, after the real loader read the written file."""
    return seed_runs(tmp_path_factory.mktemp("feed"), FAMILY, lambda seed: setup(seed)["fmt"])


@pytest.fixture(scope="module")
def tables():
    """`get(scenario, requests, seed)`: the generated table's spans as `runs` gives them (`id`, `parent`
    "" for a root, epoch ns, the events as the store's JSON text), without the file and the loader
    (blind_support.table_span_dicts), each run made once for the module. The mechanisms of seed 0 (OTLP)
    are read this way (the loader's decode and write were most of each run's CPU); the formats and
    the loader are checked on `runs`."""

    def get(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
        with collector_paused():  # the runs kept are acyclic: no collection rescans them (load_run)
            spans = table_span_dicts(feed_ranker, scenario, requests, seed, instance=host)
            for x in spans:
                x["id"], x["parent"] = x["i"], "" if x["parent"] < 0 else x["parent"]
                x["start"] += DEFAULT_START_NS
                x["end"] += DEFAULT_START_NS
                x["events"] = json.dumps([{"Name": name, "Attributes": {k: str(v) for k, v in attrs.items()}}
                                          for _, name, attrs in x["events"]]) if x["events"] else ""
        return spans

    return cache(get)


def host(r: dict) -> str:
    if "net.host.ip" in r:
        return f"{r['net.host.ip']}:{r['net.host.port']}"
    return r.get("service.instance.id") or r["hostname"]


def instance(span: dict) -> str:
    return host(span["resource"])


def named(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and (kind is None or s["kind"] == kind)]


def children(spans: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for s in spans:
        out[s["parent"]].append(s)
    return out


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def latency(spans: list[dict]) -> list[float]:
    """What the caller saw: the outermost span of each trace (Envoy's inbound span where traced)."""
    return [s["duration"] for s in spans if s["parent"] == ""]


def test_the_family_is_registered_held_out_with_its_scenarios() -> None:
    assert blind.MODULES[FAMILY] == "feed_ranker" and FAMILY not in blind.UNTOUCHED  # open since its scores
    assert FAMILY in blind.available() and blind.scenarios(FAMILY) == SCENARIOS
    two = [s for s in SCENARIOS if "+" in s]
    assert len(two) >= 3 and all(len(blind.truth(FAMILY, s, 0)) == 2 for s in two)
    assert blind.truth(FAMILY, "steady", 0) == [] and len(SCENARIOS) >= 12
    vocabulary = {"gc_pause", "lock_contention", "queueing", "cache_miss", "cold_start", "slow_dependency",
                  "network", "compute_bound", "unexplained_tail", "timeout_retry", "large_payload",
                  "cpu_throttling"}
    for scenario in SCENARIOS:
        for cause in blind.truth(FAMILY, scenario, 1):
            assert {cause["pattern"], *cause["accept"], *cause["side"]} <= vocabulary


def test_a_seed_gives_the_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    blind.write_run(a, FAMILY, "more-candidates+g1-humongous", 150, 5)
    blind.write_run(b, FAMILY, "more-candidates+g1-humongous", 150, 5)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_format_loads_and_the_truth_names_what_the_run_has(runs, seed: int) -> None:
    s = setup(seed)
    spans = runs("g1-mixed-gc+fresh-pod-jit", 500 if seed else 700, seed)
    services = {x["service"] for x in spans}
    sidecar = {"feed-api.feed"} if s["sidecar_traced"] else set()
    assert services == {"feed-api", "feature-store", "ads-blender"} | sidecar
    n = 500 if seed else 700
    assert len(named(spans, ROOT, "Server")) == n and len(named(spans, INBOUND)) == n * s["sidecar_traced"]
    for scenario in SCENARIOS:
        for cause in blind.truth(FAMILY, scenario, seed):
            where = {instance(x) for x in spans if x["service"] == cause["service"]}
            assert cause["span"] is None or named(spans, cause["span"]), (scenario, cause["span"])
            assert cause["instances"] and set(cause["instances"]) <= where, (scenario, cause)
    # the Kafka producer's batch is acknowledged after the response on many requests
    kids = children(spans)
    late = [r["end"] < next(k for k in kids[r["id"]] if k["kind"] == "Producer")["end"]
            for r in named(spans, ROOT, "Server")]
    assert np.mean(late) > 0.9  # linger.ms, then acks=all: after the response is written
    assert all(k["name"].lower() == PRODUCE[seed % 3].lower() for k in spans if k["kind"] == "Producer")


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_mixed_collections_stretch_the_spans_in_flight_and_are_reported_by_seed(runs, tables) -> None:
    steady, gc = tables("steady", 1000, 0), tables("g1-mixed-gc", 1000, 0)  # reported as span events
    reported = [e for r in named(gc, ROOT, "Server") for e in json.loads(r["events"] or "[]")]
    mixed = [float(e["Attributes"]["jvm.gc.duration"]) for e in reported
             if e["Attributes"]["jvm.gc.cause"] == "G1 Evacuation Pause (Mixed)"]
    assert len(mixed) > 10 and np.median(mixed) > 0.05
    steady_events = [e for r in named(steady, ROOT, "Server") for e in json.loads(r["events"] or "[]")]
    assert steady_events and all(float(e["Attributes"]["jvm.gc.duration"]) < 0.04 for e in steady_events)
    # the backends do not pause; the pod's spans in flight stretch together
    assert p([x["duration"] for x in named(gc, ADS_SERVER, "Server")], 90) == pytest.approx(
        p([x["duration"] for x in named(steady, ADS_SERVER, "Server")], 90), rel=0.2)
    assert p(latency(gc), 99) > 1.5 * p(latency(steady), 99)
    for seed, style in ((1, "metrics"), (2, "none")):  # metric deltas on the request span, or nothing
        roots = named(runs("g1-mixed-gc+fresh-pod-jit", 500, seed), ROOT, "Server")
        assert setup(seed)["gc_report"] == style
        deltas = [r["attrs"].get("jvm.gc.pause.count.delta") for r in roots]
        assert (style == "metrics") == all(d is not None for d in deltas)
        assert all(r["events"] in (None, "", "[]") for r in roots)
        if style == "metrics":
            assert 0 < np.mean([int(d) > 0 for d in deltas]) < 0.3


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_coordinator_slows_the_read_a_slow_second_replica_hardly(tables) -> None:
    spans, steady = tables("cassandra-slow-replica", 1000, 0), tables("steady", 1000, 0)
    reads = named(spans, CQL, "Client")
    by_node = defaultdict(list)
    for x in reads:
        by_node[x["attrs"]["db.cassandra.coordinator.id"]].append(x["duration"])
    medians = sorted((float(np.median(v)), node) for node, v in by_node.items())
    assert len(medians) == 6 and medians[-1][0] > 5 * medians[-2][0]
    # reads coordinated elsewhere: a quorum waits for the second answer, so the slow replica costs little
    others = [x["duration"] for x in reads if x["attrs"]["db.cassandra.coordinator.id"] != medians[-1][1]]
    assert p(others, 90) < 1.6 * p([x["duration"] for x in named(steady, CQL, "Client")], 90)
    assert p(latency(spans), 99) > 1.3 * p(latency(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_deploy_warm_expires_at_once_and_misses_call_the_feature_store(tables) -> None:
    spans, steady = tables("caffeine-expiry-wave", 1000, 0), tables("steady", 1000, 0)
    kids = children(spans)
    hydrate = sorted(named(spans, HYDRATE), key=lambda x: x["start"])
    misses = np.array([int(x["attrs"]["feature.cache.misses"]) for x in hydrate])
    third = int(len(hydrate) * 0.35)
    assert np.median(misses[: third - 30]) <= 2 and np.median(misses[third + 5: third + 60]) > 40
    assert np.median(misses[-100:]) < np.median(misses[third + 5: third + 60]) / 2  # refilled, decaying
    for x, m in zip(hydrate, misses, strict=True):  # calls only on misses, 64 ids a call
        calls = [k for k in kids[x["id"]] if k["name"] == FEATURE_RPC]
        assert len(calls) == -(-m // 64)
    steady_misses = [int(x["attrs"]["feature.cache.misses"]) for x in named(steady, HYDRATE)]
    assert 0.2 < np.mean(np.array(steady_misses) > 0) < 0.9 and p(steady_misses, 99) < 10
    assert p(latency(spans), 99) > 1.3 * p(latency(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_ads_call_holds_the_threads_and_requests_wait_before_the_handler(tables) -> None:
    spans, steady = tables("ads-blender-slow", 1000, 0), tables("steady", 1000, 0)

    def waits(spans):  # Envoy's inbound span start -> Tomcat handler start
        by_id = {x["id"]: x for x in spans}
        return [r["start"] - by_id[r["parent"]]["start"] for r in named(spans, ROOT, "Server")]

    assert p(waits(steady), 99) < 2 * MS and p(waits(spans), 99) > 100 * MS
    ads = [x["duration"] for x in named(spans, ADS_SERVER, "Server")]
    assert p(ads, 50) > 30 * MS and p(ads, 99) > 250 * MS
    assert len(named(spans, ADS_CALL[0], "Client")) == 1000


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_more_candidates_grow_the_ranking_with_the_count(tables) -> None:
    spans, steady = tables("more-candidates", 1000, 0), tables("steady", 1000, 0)
    rank = named(spans, RANK)
    count = np.array([int(x["attrs"]["feed.candidates.count"]) for x in rank], dtype=float)
    took = np.array([x["duration"] for x in rank], dtype=float)
    assert np.corrcoef(count, took)[0, 1] > 0.9 and count.max() > 600
    kids = children(spans)
    assert all(sum(int(b["attrs"]["batch.size"]) for b in kids[x["id"]] if b["name"] == BATCH) == c
               for x, c in zip(rank, count, strict=True))
    assert p(latency(spans), 99) > 1.3 * p(latency(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_fresh_pod_runs_its_first_requests_slowly_and_warms_up(runs) -> None:
    seed = 0
    spans = runs("g1-mixed-gc+fresh-pod-jit", 700, seed)
    (fresh,) = blind.truth(FAMILY, "fresh-pod-jit", seed)[0]["instances"]
    mine = [x for x in named(spans, ROOT, "Server") if instance(x) == fresh]
    roots = sorted(mine, key=lambda x: x["start"])
    assert len(roots) > 80 and roots[0]["start"] > min(x["start"] for x in spans)
    others = [x["duration"] for x in named(spans, ROOT, "Server") if instance(x) != fresh]
    first = np.median([x["duration"] for x in roots[:5]])
    assert first > 5 * np.median(others) and roots[0]["duration"] > 200 * MS
    early = np.median([x["duration"] for x in roots[5:30]])
    late = np.median([x["duration"] for x in roots[-25:]])
    assert first > 3 * early > 3 * 1.3 * late


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_retransmits_open_a_gap_between_the_zone_c_calls_and_their_callees(tables) -> None:
    seed = 0
    spans, steady = tables("az-retransmits", 1000, seed), tables("steady", 1000, seed)
    zone_c = {labels(0, pods_of(seed, 3), True)[k] for k in lossy(setup(seed)["pods"])}

    def gaps(spans, pods):
        kids = children(spans)
        calls = [c for c in named(spans, OUTBOUND["ads-blender"], "Client") if instance(c) in pods]
        return [c["duration"] - kids[c["id"]][0]["duration"] for c in calls]

    others = {instance(x) for x in named(spans, INBOUND)} - zone_c
    assert p(gaps(spans, zone_c), 99) > 190 * MS > 5 * MS > p(gaps(spans, others), 99)
    assert p(gaps(steady, zone_c), 99) < 5 * MS
    assert p([x["duration"] for x in named(spans, ADS_SERVER)], 99) < 60 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_throttled_sidecar_resumes_on_period_boundaries_and_the_app_does_not_stall(tables) -> None:
    seed = 0
    spans, steady = tables("sidecar-throttling+az-retransmits", 700, seed), tables("steady", 1000, seed)
    zone_c = {labels(0, pods_of(seed, 3), True)[k] for k in lossy(setup(seed)["pods"])}

    def held(spans):  # an Envoy span beyond its child (the app's SERVER span, or the callee's), zones a, b
        kids = children(spans)
        return [(x, x["end"] - kids[x["id"]][0]["end"]) for x in spans
                if x["service"] == "feed-api.feed" and instance(x) not in zone_c]

    stalled = np.array([x["end"] % (100 * MS) for x, extra in held(spans) if extra > 3 * MS])
    assert len(stalled) > 60  # held past a stall, the span ends just after a period boundary
    assert np.mean(stalled < 2 * MS) > 0.9
    assert p([extra for _, extra in held(steady)], 99) < 2 * MS
    rank = [x["duration"] for x in named(spans, RANK)]
    assert p(rank, 99) < 1.5 * p([x["duration"] for x in named(steady, RANK)], 99)
