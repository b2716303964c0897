"""The blind family `spring-loom` (reference_pipeline/simulate/spring_loom.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way pinned carriers, ZGC allocation stalls,
a merging Elasticsearch node, a Caffeine expiry wave, a slow plan behind HikariCP, a full Kafka buffer,
CFS periods, a cold JIT or one slow gRPC backend would produce it (a steady run of the same seed does
not). Three runs go through the loader; the other mechanisms are read from the generated table, to keep
the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, spring_loom
from reference_pipeline.simulate import spring_loom_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth, same bytes): its
# physics tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_spring_loom.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)
PHYSICS = pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
MS = 1e6
FAMILY = "spring-loom"
N = 1200


@cache
def table(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(spring_loom, scenario, requests, seed)


def roots(spans) -> list[dict]:
    return [x for x in spans if x["name"] == sp.ROOT and x["kind"] == "Server"]


def run_ns(requests: int, seed: int) -> float:
    return requests / spring_loom.setup(seed)["rps"] * 1e9


def label(seed: int, k: int, service: str = sp.API, gen: int = 0) -> str:
    return spring_loom.style(seed).label(service, k, gen)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("spring-loom")
    runs = {0: ("zgc-allocation-stalls", 400), 1: ("carrier-pinning", 300), 2: ("grpc-bad-backend", 300)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == spring_loom.SCENARIOS  # open now
    assert sum("+" in sc for sc in spring_loom.SCENARIOS) == 3 and spring_loom.SCENARIOS[0] == "steady"
    assert 9 <= len(spring_loom.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, st = spring_loom.setup(seed), spring_loom.style(seed)
        assert summary["format"] == s["fmt"]
        services = {x["service"] for x in spans}
        assert services == ({sp.API, sp.FEATURES} | ({sp.INGRESS} if s["ingress"] else set()))
        top = [x for x in spans if not x["parent"]]
        assert len(top) == summary["requests"] and {x["name"].lower() for x in top} == {st.top.lower()}
        names = {x["name"].lower() for x in spans}
        assert (sp.RERANK in names) == s["manual"] and (sp.FEATURE_SPAN in names) == s["manual"]
        db = named(spans, st.jdbc)[0]["attrs"]
        assert ("db.query.text" in db and "server.address" in db) == (s["semconv"] == "new")
        assert ("db.statement" in db and "net.peer.name" in db) == (s["semconv"] == "old")
        events = {e["Name"] for x in roots(spans) for e in x["events"]}
        assert bool(events) == s["jfr"]
        api = {x["instance"] for x in spans if x["service"] == sp.API}
        assert api == {label(seed, k) for k in range(s["pods"])}
        backends = {x["instance"] for x in spans if x["service"] == sp.FEATURES}
        assert backends == {label(seed, k, sp.FEATURES) for k in range(spring_loom.BACKENDS)}
        for scenario in spring_loom.SCENARIOS:
            for cause in spring_loom.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                if scenario != "deploy-cold-jit":
                    assert set(cause.instances) <= api | backends, (scenario, cause)
    for seed, event in ((0, "jdk.ZAllocationStall"), (1, "jdk.VirtualThreadPinned")):
        assert event in {e["Name"] for x in roots(loaded[seed][0]) for e in x["events"]}
    with pytest.raises(ValueError, match="unknown spring-loom scenario"):
        spring_loom.truth("healthy", 0)
    once, again = (spring_loom.generate("carrier-pinning", 60, 0) for _ in range(2))
    assert once.rows == again.rows and once.span_ids == again.span_ids  # a seed gives the same bytes


def test_a_deploy_brings_new_pods_and_the_truth_names_them() -> None:
    for seed in (0, 1, 2):
        spans = table("deploy-cold-jit", 400, seed)
        (cause,) = spring_loom.truth("deploy-cold-jit", seed)
        seen = {x["instance"] for x in roots(spans)}
        new = {label(seed, k, gen=1) for k in range(spring_loom.setup(seed)["pods"])}
        assert set(cause.instances) == new and new <= seen


@PHYSICS
def test_a_slow_model_under_the_monitor_makes_the_canarys_requests_queue_for_it_pinned() -> None:
    spans = table("carrier-pinning", N, 0)
    (canary,) = spring_loom.truth("carrier-pinning", 0)[0].instances
    rerank: dict[str, list[float]] = {}
    for x in named(spans, sp.RERANK):
        rerank.setdefault(x["instance"], []).append(x["duration"])
    assert p(rerank[canary], 90) > 2 * max(p(v, 90) for k, v in rerank.items() if k != canary)
    pinned: dict[str, int] = {}
    for x in roots(spans):
        pinned[x["instance"]] = pinned.get(x["instance"], 0) + sum(e[1] == "jdk.VirtualThreadPinned"
                                                                    for e in x["events"])
    assert pinned[canary] > 30 and pinned[canary] > 5 * max(v for k, v in pinned.items() if k != canary)
    steady = [x["duration"] for x in named(table("steady", N, 0), sp.RERANK)]
    assert p(steady, 90) < 0.5 * p(rerank[canary], 90)


@PHYSICS
def test_allocation_stalls_hold_allocating_threads_during_the_large_query_burst() -> None:
    spans = table("zgc-allocation-stalls", N, 0)
    run = run_ns(N, 0)
    stalls = [(e[0], e[2]["jfr.duration_ms"]) for x in roots(spans) for e in x["events"]
              if e[1] == "jdk.ZAllocationStall"]
    assert len(stalls) > 30 and all(0.3 * run < t < 0.56 * run for t, _ in stalls)
    heavy = [x for x in roots(spans) if x["attrs"]["app.query.heavy"]]
    assert len(heavy) > 0.1 * len(roots(spans))
    by = kids(spans)
    # the rerank's model run allocates nothing: its share of the slow requests' time does not grow
    inside, outside = [], []
    for root in roots(spans):
        at = root["start"] / run
        (inside if 0.35 < at < 0.55 else outside if at < 0.28 else []).append(root["duration"])
        assert all(x["duration"] < root["duration"] for x in by[root["i"]])
    assert p(inside, 95) > 1.5 * p(outside, 95)
    steady = [e for x in roots(table("steady", N, 0)) for e in x["events"] if e[1] == "jdk.ZAllocationStall"]
    assert not steady


@PHYSICS
def test_a_merging_node_slows_the_queries_it_serves_and_coordinates_until_ars_moves_away() -> None:
    spans = table("es-segment-merge", N, 0)
    st = spring_loom.style(0)
    run = run_ns(N, 0)

    def by_coordinator(lo: float, hi: float) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for x in named(spans, st.es):
            if lo * run <= x["start"] < hi * run:
                out.setdefault(x["attrs"]["server.address"], []).append(x["duration"])
        return out

    before = [d for v in by_coordinator(0.0, 0.14).values() for d in v]
    learning = by_coordinator(0.16, 0.27)  # ARS has not seen node 1 slow yet: every query waits on it
    learnt = by_coordinator(0.5, 0.75)  # its EWMA has risen: only what node 1 coordinates stays slow
    assert all(p(v, 50) > 2.5 * p(before, 50) for v in learning.values())
    merging = learnt.pop(sp.ES_NODES[1])
    assert all(p(merging, 50) > 1.8 * p(v, 50) and p(v, 50) < 1.3 * p(before, 50) for v in learnt.values())
    steady = [x["duration"] for x in named(table("steady", N, 0), st.es)]
    assert p(steady, 50) < 12 * MS


@PHYSICS
def test_keys_written_together_expire_together_and_misses_surge() -> None:
    run = run_ns(N, 2)

    def misses(scenario):
        spans = table(scenario, N, 2)
        after = [x["attrs"]["features.cache_misses"] for x in named(spans, sp.FEATURE_SPAN)
                 if 0.3 * run < x["start"] < 0.36 * run]
        before = [x["attrs"]["features.cache_misses"] for x in named(spans, sp.FEATURE_SPAN)
                  if x["start"] < 0.28 * run]
        keys = [x["attrs"]["app.features.keys"] for x in named(spans, sp.GRPC, "Client")]
        return np.mean(after), np.mean(before), max(keys)

    wave, steady = misses("caffeine-expiry-wave"), misses("steady")
    assert wave[0] > 4 * wave[1] and wave[0] > 4 * steady[0] and wave[2] > 100
    assert abs(steady[0] - steady[1]) < 0.3 * steady[1]


@PHYSICS
def test_a_slow_plan_holds_hikaris_connections_and_requests_wait_before_the_statement() -> None:
    st = spring_loom.style(1)
    run = run_ns(N, 1)

    def waits(scenario):
        spans = table(scenario, N, 1)
        by = kids(spans)
        out, query = [], []
        for root in roots(spans):
            if root["start"] > 0.3 * run:
                jdbc = next(x for x in by[root["i"]] if x["name"] == st.jdbc)
                out.append(jdbc["start"] - root["start"])
                query.append(jdbc["duration"])
        return p(out, 99), p(query, 50)

    slow, steady = waits("hikari-slow-plan"), waits("steady")
    assert slow[1] > 50 * MS and steady[1] < 3 * MS
    assert slow[0] > 20 * MS and steady[0] < 3 * MS


@PHYSICS
def test_a_full_producer_buffer_blocks_send_while_the_follower_is_slow() -> None:
    st = spring_loom.style(0)
    run = run_ns(2000, 0)
    sends = named(table("kafka-buffer-full", 2000, 0), st.kafka)
    late = [x["duration"] for x in sends if 0.45 * run < x["start"] < 0.6 * run]
    early = [x["duration"] for x in sends if x["start"] < 0.09 * run]
    after = [x["duration"] for x in sends if x["start"] > 0.7 * run]
    assert p(late, 50) > 20 * MS and p(early, 99) < 1 * MS and p(after, 90) < 1 * MS
    steady = [x["duration"] for x in named(table("steady", 2000, 0), st.kafka)]
    assert p(steady, 99.9) < 2 * MS


@PHYSICS
def test_throttled_pods_resume_on_their_period_boundaries() -> None:
    spans = table("cfs-throttling", N, 2)
    throttled = set(spring_loom.truth("cfs-throttling", 2)[0].instances)
    by_pod: dict[str, list[float]] = {}
    for x in roots(spans):
        by_pod.setdefault(x["instance"], []).append(x["duration"])
    assert min(p(by_pod[k], 95) for k in throttled) > 1.4 * max(
        p(v, 95) for k, v in by_pod.items() if k not in throttled)
    # a model run cut by a throttle resumes at its pod's period boundary: the slow ones' ends bunch
    for pod in throttled:
        ends = np.array([x["end"] for x in named(spans, sp.RERANK)
                         if x["instance"] == pod and x["duration"] > 40 * MS])
        phase = (ends % 100_000_000) / 1e6
        assert len(ends) > 10 and np.ptp(np.sort(phase)[len(phase) // 10: -len(phase) // 10 or None]) < 60


@PHYSICS
def test_new_pods_start_slow_and_warm_up() -> None:
    spans = table("deploy-cold-jit", N, 0)
    new = set(spring_loom.truth("deploy-cold-jit", 0)[0].instances)
    for pod in new:
        mine = sorted((x for x in roots(spans) if x["instance"] == pod), key=lambda x: x["start"])
        first, last = [x["duration"] for x in mine[:20]], [x["duration"] for x in mine[-20:]]
        assert len(mine) > 40 and np.median(first) > np.median(last) + 12 * MS


@PHYSICS
def test_every_fifth_feature_call_of_a_channel_goes_to_the_slow_backend() -> None:
    spans = table("grpc-bad-backend", N, 1)
    bad = label(1, spring_loom.BAD_BACKEND, sp.FEATURES)
    servers: dict[str, list[float]] = {}
    for x in named(spans, sp.GRPC, "Server"):
        servers.setdefault(x["instance"], []).append(x["duration"])
    assert p(servers[bad], 50) > 20 * MS
    assert all(p(v, 90) < 0.4 * p(servers[bad], 50) for k, v in servers.items() if k != bad)
    share = len(servers[bad]) / sum(map(len, servers.values()))
    assert 0.17 < share < 0.23


@PHYSICS
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int) -> None:
    st = spring_loom.style(seed)

    def p99(scenario):  # from the table's rows: 2,000 requests as span dicts would take longer
        rows = spring_loom.generate(scenario, 2000, seed).rows
        return p([r[7] - r[6] for r in rows if r[1] == -1 and r[2] == st.top], 99)

    base = p99("steady")
    for scenario in spring_loom.SINGLES:
        assert p99(scenario) > 1.3 * base, scenario


@PHYSICS
@pytest.mark.parametrize("pair", spring_loom.PAIRS)
def test_a_two_cause_run_has_both_mechanisms(pair: str) -> None:
    seed = 0
    st = spring_loom.style(seed)
    both, steady = table(pair, N, seed), table("steady", N, seed)

    def marks(spans) -> set[str]:
        out = set()
        if p([x["duration"] for x in named(spans, st.jdbc)], 50) > 30 * MS:
            out.add("hikari-slow-plan")
        rr: dict[str, list[float]] = {}
        for x in named(spans, sp.RERANK):
            rr.setdefault(x["instance"], []).append(x["duration"])
        if max(p(v, 90) for v in rr.values()) > 2.5 * min(p(v, 90) for v in rr.values()):
            out.add("carrier-pinning")
        if max(x["attrs"]["features.cache_misses"] for x in named(spans, sp.FEATURE_SPAN)) > 100:
            out.add("caffeine-expiry-wave")
        srv: dict[str, list[float]] = {}
        for x in named(spans, sp.GRPC, "Server"):
            srv.setdefault(x["instance"], []).append(x["duration"])
        medians = sorted(p(v, 50) for v in srv.values())
        if medians[-1] > medians[len(medians) // 2] + 20 * MS:
            out.add("grpc-bad-backend")
        es: dict[str, list[float]] = {}
        for x in named(spans, st.es):
            es.setdefault(x["attrs"]["server.address"], []).append(x["duration"])
        if max(p(v, 75) for v in es.values()) > 2 * min(p(v, 75) for v in es.values()):
            out.add("es-segment-merge")
        if max(x["duration"] for x in named(spans, st.kafka)) > 20 * MS:
            out.add("kafka-buffer-full")
        return out

    assert marks(both) == set(pair.split("+")) and not marks(steady)
