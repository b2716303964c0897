"""The blind family `go-ray` (reference_pipeline/simulate/go_ray.py; held out): each seed's format loads
through the real loader with its conventions, the truth names spans, services and instances the run
has, and each planted mechanism shows in the timings the way a CFS quota, Go's GC assists, Ray Serve's
router, batcher and autoscaler, Redis, Feast's fallback, a per-try deadline, a payload or a lossy path
would produce it (a steady run of the same seed does not). Three runs go through the loader; the other
mechanisms are read from the generated table, to keep the file fast."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, go_ray
from reference_pipeline.simulate import go_ray_spans as sp
from tests.blind_support import instance_label as label
from tests.blind_support import load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_go_ray.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "go-ray"
N = 1000
STAGES = ("queue", "feature_hydration", "downstream", "postprocessing", "model_forward", None)


@cache
def table_spans(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(go_ray, scenario, requests, seed)


def roots(spans, seed: int) -> list[dict]:
    return named(spans, go_ray.style(seed).root, "Server", sp.GW)


def run_ns(requests: int, seed: int) -> float:
    return requests / go_ray.setup(seed)["rps"] * 1e9


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("go-ray")
    runs = {0: ("steady", 300), 1: ("flaky-replica-retries", 600), 2: ("router-saturation", 400)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed) for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == go_ray.SCENARIOS  # open now
    assert sum("+" in sc for sc in go_ray.SCENARIOS) == 3 and go_ray.SCENARIOS[0] == "steady"
    assert len(go_ray.SINGLES) == 10
    for seed, (spans, summary) in loaded.items():
        s, style = go_ray.setup(seed), go_ray.style(seed)
        assert summary["format"] == s["fmt"]
        assert {x["service"] for x in spans} == {sp.GW, sp.FEAST, sp.RANKER}
        top = [x for x in spans if not x["parent"]]
        gw = [x for x in top if x["service"] == sp.GW]
        assert len(gw) == summary["requests"] - sum(x["service"] == sp.RANKER for x in top)
        assert all(x["events"] in (None, "", "[]") for x in spans)  # Go's GC is only in metrics
        redis = next(x for x in spans if x["name"].lower() == sp.HMGET.lower())["attrs"]
        assert ("server.address" in redis) == (s["semconv"] == "new")
        assert ("net.peer.name" in redis) == (s["semconv"] == "old")
        names = {x["name"].lower() for x in spans}
        assert (sp.FORWARD.lower() in names) == (s["internals"] == "full")
        assert (sp.BATCH.lower() in names) == (s["internals"] in ("full", "batch"))
        assert ("post /rank" in names) == (s["transport"] == "http")
        assert (sp.GRPC.lower() in names) == (s["transport"] == "grpc")
        labels = {service: {label(x["resource"]) for x in spans if x["service"] == service}
                  for service in (sp.GW, sp.FEAST, sp.RANKER)}
        assert len(labels[sp.GW]) == s["gw_pods"] and len(labels[sp.FEAST]) == s["feast_pods"]
        replicas = {label(x["resource"]) for x in spans if x["name"].lower() == sp.REPLICA.lower()}
        assert len(replicas) == s["nodes"] and len(labels[sp.RANKER] - replicas) <= s["nodes"]  # + proxies
        assert ("service.instance.id" in gw[0]["resource"]) == (s["ident"] == "instance-id")
        for scenario in go_ray.SCENARIOS:
            for cause in go_ray.truth(scenario, seed):
                assert cause.stage in STAGES and cause.service in labels, (scenario, cause)
                if cause.pattern != "cold_start":  # new replicas: see the autoscaling test
                    assert set(cause.instances) <= labels[cause.service], (scenario, cause)
                assert cause.span.lower() in names or cause.span == sp.FALLBACK, (scenario, cause)
        assert style.root.lower() in names
    with pytest.raises(ValueError, match="unknown go-ray scenario"):
        go_ray.truth("healthy", 0)


def _stretched(spans, seed: int, floor_ms: float) -> list[dict]:
    """The gateway's client spans that ended well after their server's answer could have reached it
    (but not a retransmission timeout later): the goroutine that reads the answer could not run."""
    parent = {x["i"]: x for x in spans}
    out = []
    for server in spans:
        call = parent.get(server["parent"])
        gateway = call is not None and call["service"] == sp.GW and call["kind"] == "Client"
        if gateway and floor_ms * MS < call["end"] - server["end"] < 150 * MS:
            out.append(call)
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_throttled_gateway_work_resumes_on_a_period_boundary_during_peaks() -> None:
    spans = table_spans("cfs-peaks", N, 0)
    first = min(x["start"] for x in spans)
    stretched = _stretched(spans, 0, 8.0)
    assert len(stretched) >= 10
    # a throttled thread resumes when its pod's quota refills: the ends share the 100 ms period's phase
    near = []
    for pod in {x["instance"] for x in stretched}:
        phase = np.array([(x["end"] - first) % (100 * MS) for x in stretched if x["instance"] == pod])
        mode = phase[np.argmax([np.sum(np.abs((phase - f + 50 * MS) % (100 * MS) - 50 * MS) < 2 * MS)
                                for f in phase])]
        near += list(np.abs((phase - mode + 50 * MS) % (100 * MS) - 50 * MS) < 2 * MS)
    assert np.mean(near) > 0.7
    # and they come in the peaks: where the arrival rate is several times the mean
    starts = np.sort([x["start"] for x in roots(spans, 0)])
    rate = [np.sum(np.abs(starts - x["start"]) < 125 * MS) for x in stretched]
    assert np.median(rate) > 2.5 * go_ray.setup(0)["rps"] * 0.25
    assert len(_stretched(table_spans("steady", N, 0), 0, 8.0)) <= 2


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_growing_heap_stretches_allocating_work_more_and_more_as_it_grows() -> None:
    spans, steady = table_spans("heap-growth-gc", N, 0), table_spans("steady", N, 0)
    run = run_ns(N, 0)

    def slowed(spans, a, b):  # the allocating work (parse, decode, encode) that took > 10 ms
        work = [x["duration"] for x in spans if x["name"] in (sp.PARSE, sp.DECODE, sp.ENCODE)
                and a * run <= x["start"] < b * run]
        return np.mean(np.array(work) > 10 * MS), p(work, 50)

    assert slowed(spans, 0.0, 0.15)[0] < 0.003 and slowed(steady, 0.0, 1.0)[0] < 0.002
    (late, median), (_, calm) = slowed(spans, 0.6, 1.0), slowed(steady, 0.6, 1.0)
    assert late > 0.02 and median < 1.5 * calm  # only the work that meets a mark phase


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_saturating_batch_client_makes_the_gateways_calls_wait_in_the_router(loaded) -> None:
    spans, _ = loaded[2]  # Zipkin: only the proxy and replica spans on the ranker
    by_parent = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    foreign = [x for x in spans if not x["parent"] and x["service"] == sp.RANKER]
    assert len(foreign) > 100
    assert all(by_parent[x["id"]][0]["attrs"]["ray.serve.request.pairs"] == "1000" for x in foreign
               if x["id"] in by_parent)
    run = run_ns(400, 2)
    first = min(x["start"] for x in spans)
    inside, outside = [], []
    for proxy in (x for x in named(spans, sp.GRPC, "Server") if x["parent"]):
        replica = by_parent.get(proxy["id"])
        if not replica:
            continue
        at = (proxy["start"] - first) / run
        wait = replica[0]["start"] - proxy["start"]
        (inside if 0.4 < at < 0.6 else outside if at < 0.25 else []).append(wait)
    assert p(inside, 75) > 12 * MS and p(outside, 75) < 4 * MS  # outside: a running batch at most


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_autoscaled_replicas_start_cold_and_warm_up() -> None:
    spans = table_spans("autoscale-cold", N, 0)
    (cause,) = go_ray.truth("autoscale-cold", 0)
    forward = named(spans, sp.FORWARD)
    by_instance: dict[str, list[dict]] = {}
    for x in forward:
        by_instance.setdefault(x["instance"], []).append(x)
    new = set(by_instance) - {x["instance"] for x in forward if x["start"] < 0.1 * run_ns(N, 0)}
    assert new == set(cause.instances)
    for inst in new:
        batches = sorted({(x["start"], x["duration"]) for x in by_instance[inst]})  # a span per member
        assert batches[0][1] > 500 * MS  # the first batch: lazy CUDA modules, cudnn autotune
        if len(batches) >= 3:  # warming up (a replica ready late in the run has few batches)
            assert batches[-1][1] < 0.06 * batches[0][1] and batches[-1][1] < batches[1][1]
    old = [x["duration"] for inst, xs in by_instance.items() if inst not in new for x in xs]
    assert max(old) < 100 * MS
    steady = {x["instance"] for x in named(table_spans("steady", N, 0), sp.FORWARD)}
    assert len(steady) == go_ray.setup(0)["nodes"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_long_batch_wait_timeout_holds_calls_in_the_replica_before_their_batch() -> None:
    def waits(scenario):
        spans = table_spans(scenario, N, 0)
        parent = {x["i"]: x for x in spans}
        batches = named(spans, sp.BATCH)
        return ([x["start"] - parent[x["parent"]]["start"] for x in batches],
                np.mean([x["attrs"]["serve.batch.size"] for x in batches]))

    (slow, size), (fast, steady_size) = waits("batch-wait-timeout"), waits("steady")
    assert p(slow, 50) > 25 * MS and p(fast, 99) < 8 * MS and size > 2 * steady_size
    assert max(slow) < 110 * MS  # never longer than the timeout (+ a running batch)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_expired_rows_fall_back_to_the_offline_call_after_the_wave() -> None:
    def share(scenario, a, b):
        spans = table_spans(scenario, N, 0)
        run = run_ns(N, 0)
        served = [x for x in named(spans, sp.FEAST_ROUTE) if a * run <= x["start"] < b * run]
        fallback = {x["parent"] for x in named(spans, sp.FALLBACK)}
        return np.mean([x["i"] in fallback for x in served])

    assert share("ttl-expiry-wave", 0.0, 0.28) < 0.03 and share("ttl-expiry-wave", 0.35, 1.0) > 0.1
    assert share("steady", 0.35, 1.0) < 0.03
    spans = table_spans("ttl-expiry-wave", N, 0)
    assert p([x["duration"] for x in named(spans, sp.FALLBACK)], 10) > 50 * MS
    assert len(named(spans, sp.HSET)) == len(named(spans, sp.FALLBACK))  # written back


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_redis_primary_on_a_slow_disk_stalls_every_read_it_serves() -> None:
    def by_shard(scenario):
        out: dict[str, list[float]] = {}
        for x in named(table_spans(scenario, N, 0), sp.HMGET):
            out.setdefault(x["attrs"]["server.address"], []).append(x["duration"])
        return out

    slow, steady = by_shard("redis-slow-disk"), by_shard("steady")
    bad = sp.SHARDS[go_ray.SLOW_SHARD]
    assert all(p(slow[bad], 90) > 10 * p(v, 90) for h, v in slow.items() if h != bad)
    assert np.mean(np.array(slow[bad]) > 40 * MS) > 0.05
    assert max(max(v) for v in steady.values()) < 20 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_tries_on_a_hanging_replica_end_at_the_per_try_deadline_and_are_retried(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger, HTTP to Ray's proxy
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    failed, retried = [], 0
    for root in (x for x in spans if x["service"] == sp.GW and not x["parent"]):
        tries = sorted((x for x in by_parent[root["id"]] if x["name"] == "POST /rank"),
                       key=lambda x: x["start"])
        for a, b in itertools.pairwise(tries):
            assert a["status"] == "Error"
            assert 15 * MS < b["start"] - a["end"] < 70 * MS  # backoff with jitter
            retried += 1
        failed += [x for x in tries if x["status"] == "Error" and x["duration"] > 200 * MS]
    assert len(failed) >= 6 and retried >= len(failed)
    assert all(abs(x["duration"] - 250 * MS) < 1 * MS for x in failed)
    flaky = go_ray.style(1).label(sp.RANKER, go_ray.FLAKY_REPLICA, go_ray.FLAKY_REPLICA)
    served = [by_parent[by_parent[x["id"]][0]["id"]] for x in failed if x["id"] in by_parent]
    assert {label(r[0]["resource"]) for r in served if r} == {flaky}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_decode_time_grows_with_the_response_size() -> None:
    for scenario in ("topk-payload", "steady"):
        decode = named(table_spans(scenario, N, 2), sp.DECODE)
        size = np.array([x["attrs"]["app.ranker.response_bytes"] / 1024 for x in decode])
        slope = np.polyfit(size, [x["duration"] / MS for x in decode], 1)[0]
        assert slope > 0.02  # ms per KB, in either run: the cost model is the same
        assert (np.median(size) > 200) == (scenario == "topk-payload")


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_cross_zone_pod_pays_more_rtt_and_retransmission_timeouts_on_its_calls() -> None:
    spans = table_spans("cross-zone-pod", N, 0)
    (cause,) = go_ray.truth("cross-zone-pod", 0)
    parent = {x["i"]: x for x in spans}
    gap: dict[bool, list[float]] = {True: [], False: []}
    for proxy in named(spans, sp.GRPC, "Server"):
        call = parent.get(proxy["parent"])
        if call is not None and call["status"] != "Error":
            gap[call["instance"] in cause.instances].append(call["duration"] - proxy["duration"])
    assert p(gap[True], 50) > p(gap[False], 50) + 1.5 * MS
    assert np.mean(np.array(gap[True]) > 190 * MS) > 0.02 > 5 * np.mean(np.array(gap[False]) > 190 * MS)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("seed", [0])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int) -> None:
    def p99(scenario):
        return p([x["duration"] for x in roots(table_spans(scenario, N, seed), seed)], 99)

    base = p99("steady")
    for scenario in go_ray.SINGLES:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "redis-slow-disk":
        bad = [x["duration"] for x in named(spans, sp.HMGET) if x["attrs"]["server.address"] == sp.SHARDS[2]]
        return np.mean(np.array(bad) > 40 * MS) > 0.03
    if part == "heap-growth-gc":
        late = [x["duration"] for x in spans if x["name"] in (sp.PARSE, sp.DECODE, sp.ENCODE)
                and x["start"] > 0.6 * run_ns(N, seed)]
        return np.mean(np.array(late) > 10 * MS) > 0.015
    if part == "cfs-peaks":
        return len(_stretched(spans, seed, 8.0)) >= 10
    if part == "autoscale-cold":
        return len({x["instance"] for x in named(spans, sp.FORWARD)}) > go_ray.setup(seed)["nodes"]
    if part == "ttl-expiry-wave":
        return len(named(spans, sp.FALLBACK)) > 0.08 * N
    assert part == "cross-zone-pod"
    zone = go_ray.truth("cross-zone-pod", seed)[0].instances
    return sum(x["duration"] > 200 * MS for x in named(spans, sp.GRPC, "Client") if x["instance"] in zone) > 5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", go_ray.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in go_ray.truth(pair, 0)] == [go_ray.truth(x, 0)[0].pattern for x in parts]
    both, steady = table_spans(pair, N, 0), table_spans("steady", N, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
