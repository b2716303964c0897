"""The untouched blind family `recsys-ranker` (reference_pipeline/simulate/recsys_ranker.py): it generates
in each of its formats, loads through the real loader, its truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way the JVM, the pools, the network or the
model server would produce it (and a steady run of the same seed does not). No diagnosis is run here:
the family is held out, its first score is the honest figure."""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from ingest.span_json import collector_paused
from reference_pipeline.simulate import blind, recsys_ranker
from reference_pipeline.simulate.recsys_calls import (
    EXECUTE,
    FEATURE_RPC,
    FETCH,
    MODEL_RPC,
    QUEUE_SPAN,
    ROOT,
    SEEN,
    SERIALIZE,
    TIGHT_DEADLINE_MS,
)
from reference_pipeline.simulate.recsys_ranker import SCENARIOS, lossy_pods, setup
from tests.blind_support import seed_runs, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_recsys.py::test_every_format_loads_and_the_truth_names_what_the_run_has[0-1500]",
    "tests/test_simulate_blind_recsys.py::test_every_format_loads_and_the_truth_names_what_the_run_has[1-1500]",
    "tests/test_simulate_blind_recsys.py::test_every_format_loads_and_the_truth_names_what_the_run_has[2-1500]",
    "tests/test_simulate_blind_recsys.py::test_every_format_loads_and_the_truth_names_what_the_run_has[3-3000]",
)

MS = 1e6
FAMILY = "recsys-ranker"
INGRESS = "router ranker-api egress"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """The run's spans as the store holds them, after the real loader read the written file."""
    return seed_runs(tmp_path_factory.mktemp("recsys"), FAMILY, lambda seed: setup(seed)["fmt"])


@pytest.fixture(scope="module")
def tables():
    """`get(scenario, requests, seed)`: the generated table's spans as the file holds them, without the
    file and the loader (blind_support.table_span_dicts; `id` = `i`, which children name as `parent`),
    each run made once for the module. The mechanisms are read this way (the loader's decode and
    write were ~2/3 of each run's CPU); the formats and the loader are checked on `runs`."""

    def get(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
        with collector_paused():  # the runs kept are acyclic: no collection rescans them (load_run)
            spans = table_span_dicts(recsys_ranker, scenario, requests, seed, instance=pod)
            for x in spans:
                x["id"] = x["i"]
        return spans

    return cache(get)


def pod(r: dict) -> str:
    """The truth's instance label of a resource: the pod's name, or a Zipkin endpoint's ip:port."""
    if "net.host.ip" in r:
        return f"{r['net.host.ip']}:{r['net.host.port']}"
    return r["k8s.pod.name"]


def instance(span: dict) -> str:
    return pod(span["resource"])


def named(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and (kind is None or s["kind"] == kind)]


def children(spans: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for s in spans:
        out[s["parent"]].append(s)
    return out


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def test_the_family_is_registered_with_its_scenarios() -> None:
    assert not {"kafka-scorer", "recsys-ranker"} & set(blind.UNTOUCHED)  # open since their honest scores
    assert FAMILY in blind.available() and blind.scenarios(FAMILY) == SCENARIOS
    two = [s for s in SCENARIOS if "+" in s]
    assert len(two) >= 2 and all(len(blind.truth(FAMILY, s, 0)) == 2 for s in two)
    assert blind.truth(FAMILY, "steady", 0) == [] and len(blind.truth(FAMILY, "autoscale-burst", 0)) == 2


def test_a_seed_gives_the_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    blind.write_run(a, FAMILY, "ranker-gc+slow-features", 200, 5)
    blind.write_run(b, FAMILY, "ranker-gc+slow-features", 200, 5)
    assert a.read_bytes() == b.read_bytes()


# seed 3's run is test_autoscaled_pods_start_cold_and_warm_up's (3,000 requests): one run fewer
@pytest.mark.parametrize("seed,requests", [(0, 1500), (1, 1500), (2, 1500), (3, 3000)])
def test_every_format_loads_and_the_truth_names_what_the_run_has(runs, seed: int, requests: int) -> None:
    s = setup(seed)
    spans = runs("autoscale-burst", requests, seed)
    services = {x["service"] for x in spans}
    assert services == {"ranker-api", "feature-svc", "model-server"} | (
        {"envoy-ingress"} if s["ingress_traced"] else set())
    roots = named(spans, ROOT, "Server")
    assert len(roots) == requests
    if s["ingress_traced"]:  # the ingress' CLIENT span is the root; the SERVER span its child
        ingress = {x["id"]: x for x in named(spans, INGRESS, "Client")}
        assert all(r["parent"] in ingress and ingress[r["parent"]]["start"] < r["start"] for r in roots)
    else:  # the ingress' X-Request-Start header, captured on the SERVER span
        assert all(r["parent"] == "" and r["attrs"]["http.request.header.x-request-start"].startswith("t=")
                   for r in roots)
    assert bool(named(spans, QUEUE_SPAN)) == s["queue_span"]
    servers = named(spans, MODEL_RPC, "Server")
    assert all(("inference.queue.duration_us" in x["attrs"]) != s["queue_span"] for x in servers)
    for scenario in SCENARIOS:
        for cause in blind.truth(FAMILY, scenario, seed):
            where = {instance(x) for x in spans if x["service"] == cause["service"]}
            assert named(spans, cause["span"]), (scenario, cause["span"])
            assert cause["instances"] and set(cause["instances"]) <= where, (scenario, cause)
            assert cause["accept"] == [] and set(cause["side"]) <= {"queueing", "slow_dependency",
                                                                     "lock_contention"}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gc_pauses_stretch_every_ranker_span_in_flight_and_leave_the_backends_alone(tables) -> None:
    for seed in (0, 1, 2):  # GC reported as span events, as MXBean deltas, not at all
        steady, paused = tables("steady", 2000, seed), tables("ranker-gc", 2000, seed)

        def late_reads(spans):  # backend SERVER end -> ranker-api CLIENT end: the reply read late
            kids = children(spans)
            calls = named(spans, FEATURE_RPC, "Client") + named(spans, MODEL_RPC, "Client")
            return [c["end"] - kids[c["id"]][0]["end"] for c in calls]

        def backend(spans):
            return [x["duration"] for x in named(spans, FEATURE_RPC, "Server")]

        # young pauses (3-12 ms) delay a reply a little; mixed and full collections by tens of ms or more
        assert max(late_reads(steady)) < 15 * MS
        assert sum(late > 20 * MS for late in late_reads(paused)) >= 8
        assert p(backend(paused), 90) == pytest.approx(p(backend(steady), 90), rel=0.15)
        # one pause stretches the spans in flight on its pod together: slow spans of several requests
        # on one pod are all in flight at the same moment
        assert stretched_together(paused) >= 3 > stretched_together(steady)
        roots = named(paused, ROOT, "Server")
        style = setup(seed)["gc_style"]
        reported_events = [r for r in roots if r["events"]]
        reported_jmx = [r for r in roots if "jvm.gc.collection_time_ms.delta" in r["attrs"]]
        assert bool(reported_events) == (style == "events") and bool(reported_jmx) == (style == "jmx")
        if style == "jmx":
            assert max(int(r["attrs"]["jvm.gc.collection_time_ms.delta"]) for r in reported_jmx) >= 40


def stretched_together(spans: list[dict]) -> int:
    """The most requests whose ranker-api spans (under the SERVER span) of over 30 ms were all in flight
    on one pod at one moment (a moment just before one of them ended)."""
    slow = defaultdict(list)
    for x in spans:
        if x["service"] == "ranker-api" and x["kind"] != "Server" and x["duration"] > 30 * MS:
            slow[instance(x)].append(x)
    best = 0
    for pod in slow.values():
        for x in pod:
            t = x["end"] - MS
            best = max(best, len({y["trace"] for y in pod if y["start"] <= t <= y["end"]}))
    return best


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_thread_pool_burst_grows_the_wait_before_the_handler_with_the_arrival_rate(tables) -> None:
    spans = tables("thread-pool-burst", 2000, 0)
    steady = tables("steady", 2000, 0)

    def waits(spans):
        by_id = {x["id"]: x for x in spans}
        pairs = sorted((by_id[r["parent"]]["start"], r["start"] - by_id[r["parent"]]["start"])
                       for r in named(spans, ROOT, "Server"))
        return np.array([a for a, _ in pairs]), np.array([w for _, w in pairs])

    starts, wait = waits(spans)
    rate = 1e9 / np.maximum(np.convolve(np.diff(starts), np.ones(25) / 25, mode="same"), 1.0)
    busy = rate > np.percentile(rate, 85)
    assert np.median(wait[1:][busy]) > 10 * np.median(wait[1:][~busy])
    assert np.median(wait) < 2 * MS and p(waits(steady)[1], 99) < 5 * MS
    assert p(wait, 95) > 20 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_pool_exhaustion_waits_for_a_connection_before_the_query(tables) -> None:
    def gaps(spans):
        kids = children(spans)
        return [kids[x["id"]][0]["start"] - x["start"] for x in named(spans, SEEN)]

    pool, steady = tables("pool-exhaustion", 1500, 0), tables("steady", 2000, 0)
    assert p(gaps(steady), 99) < 1 * MS < 5 * MS < p(gaps(pool), 90)
    jdbc = [x["duration"] for x in named(pool, "SELECT recsys.seen_items")]
    assert p(jdbc, 90) < 3 * MS  # the query itself is as fast as ever


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_deadline_cuts_first_attempts_at_the_deadline_and_retries(tables) -> None:
    for seed in (1, 2):  # Jaeger, Zipkin
        spans, steady = tables("feature-deadline", 1500, seed), tables("steady", 2000, seed)
        calls = named(spans, FEATURE_RPC, "Client")
        failed = [c for c in calls if c["status"] == "Error"]
        assert 0.04 * 1500 < len(failed) < 0.2 * 1500
        durations = np.array([c["duration"] for c in failed], dtype=float)
        # cut at the deadline (a ms of slack: the JVM's own young pauses)
        assert np.median(np.abs(durations - TIGHT_DEADLINE_MS * MS)) < 0.05 * MS
        assert all(str(c["attrs"]["rpc.grpc.status_code"]) == "4" for c in failed)
        by_trace = defaultdict(list)
        for c in calls:
            by_trace[c["trace"]].append(c)
        for c in failed:
            attempts = sorted(by_trace[c["trace"]], key=lambda x: x["start"])
            later = [a for a in attempts if a["start"] >= c["end"]]
            assert later or len(attempts) == 3  # retried, unless it was the last attempt
        kids = children(spans)
        assert all(kids[c["id"]][0]["status"] == "Error" for c in failed)  # the server's context ended too
        assert not [x for x in steady if x["status"] == "Error"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_cache_stampede_sends_misses_to_postgres_after_the_refresh(tables) -> None:
    # the steady side: the 2,000-request run of the same seed the other tests load (its share of
    # Postgres reads is a rate, under 1 % of the requests either way)
    spans, steady = tables("cache-stampede", 3000, 0), tables("steady", 2000, 0)
    fetches = sorted(named(spans, FETCH), key=lambda x: x["start"])
    source = np.array([x["attrs"]["candidates.source"] == "postgres" for x in fetches])
    third = len(fetches) // 3
    before, wave, late = source[: third - 50], source[third + 20: third + 320], source[-300:]
    assert before.mean() < 0.01 and wave.mean() > 0.2 and late.mean() < wave.mean() / 2
    assert len(named(steady, "SELECT recsys.candidates")) < 0.01 * 2000
    kids = children(spans)
    for x in fetches:  # a Postgres read only after a Redis miss
        names = [k["name"].lower() for k in sorted(kids[x["id"]], key=lambda k: k["start"])]
        assert names == {"caffeine": [], "redis": ["get"], "postgres":
                         ["get", "select recsys.candidates", "set"]}[x["attrs"]["candidates.source"]]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_batcher_queue_grows_inside_the_model_server(tables) -> None:
    for seed in (0, 1):  # the queue as its own span, then as an attribute
        spans, steady = tables("batcher-queue", 2000, seed), tables("steady", 2000, seed)

        own_span = setup(seed)["queue_span"]

        def queue(spans, own_span=own_span):
            if own_span:
                return [x["duration"] for x in named(spans, QUEUE_SPAN)]
            servers = named(spans, MODEL_RPC, "Server")
            return [int(x["attrs"]["inference.queue.duration_us"]) * 1000 for x in servers]

        assert p(queue(steady), 99) < 5 * MS < 25 * MS < p(queue(spans), 99)
        sizes = [int(x["attrs"]["inference.batch.size"]) for x in named(spans, EXECUTE)]
        assert max(sizes) == 32 and p(sizes, 50) >= 2
        feature = [x["duration"] for x in named(spans, FEATURE_RPC, "Server")]
        assert p(feature, 99) < 30 * MS  # nothing else slowed


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_autoscaled_pods_start_cold_and_warm_up(runs) -> None:
    seed = 3
    spans = runs("autoscale-burst", 3000, seed)
    new = set(blind.truth(FAMILY, "autoscale-burst", seed)[1]["instances"])
    for pod in new:
        roots = sorted((x for x in named(spans, ROOT, "Server") if instance(x) in new and instance(x) == pod),
                       key=lambda x: x["start"])
        assert len(roots) > 60
        first = np.median([x["duration"] for x in roots[:10]])
        last = np.median([x["duration"] for x in roots[-40:]])
        assert first > 5 * last and roots[0]["duration"] > 300 * MS and last < 25 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_large_responses_grow_serialisation_with_the_item_count(tables) -> None:
    spans = tables("large-responses", 2000, 4)
    ser = sorted(named(spans, SERIALIZE), key=lambda x: x["start"])
    items = np.array([int(x["attrs"]["recsys.response.items"]) for x in ser], dtype=float)
    took = np.array([x["duration"] for x in ser], dtype=float)
    assert np.corrcoef(items, took)[0, 1] > 0.9
    assert (items[:300] > 100).mean() < 0.05 < 0.3 < (items[-300:] > 100).mean()
    roots = named(spans, ROOT, "Server")
    sizes = np.array([int(x["attrs"]["http.response.body.size"]) for x in roots], dtype=float)
    assert sizes.max() > 250_000 and np.median(sizes) < 100_000


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_network_jitter_adds_client_server_gaps_on_the_lossy_node_only(tables) -> None:
    seed = 4
    spans, steady = tables("network-jitter", 2000, seed), tables("steady", 2000, seed)
    lossy = set(blind.truth(FAMILY, "network-jitter", seed)[0]["instances"])
    assert lossy and len(lossy) == len(lossy_pods(setup(seed))) < setup(seed)["pods"]

    def gaps(spans, pods):
        kids = children(spans)
        calls = [c for c in named(spans, MODEL_RPC, "Client") if instance(c) in pods]
        return [c["duration"] - kids[c["id"]][0]["duration"] for c in calls]

    others = {instance(x) for x in named(spans, ROOT)} - lossy
    assert p(gaps(spans, lossy), 99) > 20 * MS > 2 * MS > p(gaps(spans, others), 99)
    assert p(gaps(steady, lossy), 99) < 2 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_heavy_model_makes_execution_dominate(tables) -> None:
    spans, steady = tables("heavy-model", 1500, 0), tables("steady", 2000, 0)
    execute = np.median([x["duration"] for x in named(spans, EXECUTE)])
    root = np.median([x["duration"] for x in named(spans, ROOT, "Server")])
    assert execute > 20 * MS and execute > 0.4 * root
    assert np.median([x["duration"] for x in named(steady, EXECUTE)]) < 4 * MS
