"""The blind family `vertx-hazelcast` (reference_pipeline/simulate/vertx_hazelcast.py; held out): each
seed's format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way a blocked event loop, a
saturated worker pool, ZGC allocation stalls, a cold JIT, emptied near caches, migrating partitions,
Envoy's circuit breaker and outlier ejection, a batcher's queue delay or a larger model would produce
it (a steady run of the same seed does not). Three runs go through the loader; the other mechanisms
are read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, vertx_hazelcast
from reference_pipeline.simulate import vertx_hazelcast_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_vertx_hazelcast.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "vertx-hazelcast"
N = 800


@cache
def table(scenario: str, seed: int, requests: int = N) -> tuple[dict, ...]:
    return table_span_dicts(vertx_hazelcast, scenario, requests, seed)


def run_ns(seed: int, requests: int = N) -> float:
    return requests / vertx_hazelcast.setup(seed)["rps"] * 1e9


def roots(spans) -> list[dict]:
    return named(spans, sp.ROOT, "Server", sp.GATEWAY)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp(FAMILY)
    runs = {
        0: ("eventloop-blocking-jdbc", 400),
        1: ("breaker-overflow-burst", 500),
        2: ("near-cache-invalidation", 400),
    }
    return {
        seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label)
        for seed, (scenario, n) in runs.items()
    }


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.MODULES[FAMILY] == "vertx_hazelcast"  # open now
    assert blind.scenarios(FAMILY) == vertx_hazelcast.SCENARIOS and vertx_hazelcast.SCENARIOS[0] == "steady"
    assert len(vertx_hazelcast.SINGLES) == 10 and len(vertx_hazelcast.PAIRS) == 3
    for seed, (spans, summary) in loaded.items():
        s, style = vertx_hazelcast.setup(seed), vertx_hazelcast.style(seed)
        assert summary["format"] == s["fmt"]
        services = {x["service"] for x in spans}
        assert services == ({sp.GATEWAY, sp.MODEL} | ({sp.ENVOY} if style.envoy else set()))
        top = roots(spans)
        assert len(top) == summary["requests"] - len(named(spans, sp.HISTORY, "Server"))
        assert all(x["parent"] for x in top) == style.envoy  # under Envoy's ingress span, or roots
        db = named(spans, sp.EVENTS_SPAN)[0]["attrs"]
        assert ("db.query.text" in db and "server.address" in db) == (style.semconv == "new")
        assert ("db.statement" in db and "net.peer.name" in db) == (style.semconv == "old")
        assert ("thread.name" in db) == style.threads
        names = {x["name"].lower() for x in spans}
        assert (sp.COMPUTE in names) == style.internals
        assert (style.hz_span(1) or "none").lower() in names or style.hz is None
        assert not {n.lower() for pair in sp.HZ_NAMES.values() for n in pair} & names or style.hz is not None
        gateway = {x["instance"] for x in top}
        assert len(gateway) == s["pods"]
        assert ("service.instance.id" in top[0]["resource"]) == (style.ident == "uuid")
        model = {x["instance"] for x in spans if x["service"] == sp.MODEL}
        for scenario in vertx_hazelcast.SCENARIOS:
            for cause in vertx_hazelcast.truth(scenario, seed):
                assert cause.span.lower() in names or cause.span == sp.ASSEMBLE, (scenario, cause)
                if cause.service == sp.MODEL:
                    assert set(cause.instances) <= model, (scenario, cause)
                elif cause.pattern != "cold_start":  # the deploy's new pods are not in these runs
                    assert cause.instances and set(cause.instances) <= gateway, (scenario, cause)
    with pytest.raises(ValueError, match="unknown vertx-hazelcast scenario"):
        vertx_hazelcast.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_blocking_call_on_an_event_loop_holds_every_request_pinned_to_that_loop(loaded) -> None:
    spans, _ = loaded[0]  # OTLP: Envoy's ingress span, thread details
    by_id = {x["id"]: x for x in spans}
    consent = named(spans, sp.CONSENT_SPAN)
    assert 10 < len(consent) < 60 and p([x["duration"] for x in consent], 50) > 25 * MS
    held, free = [], []
    for c in consent:
        pod, loop = c["instance"], c["attrs"]["thread.name"]
        for r in roots(spans):
            envoy = by_id[r["parent"]]
            if r["instance"] == pod and c["start"] + 2 * MS < envoy["start"] < c["end"] - 2 * MS:
                wait = r["start"] - envoy["start"]
                (held if r["attrs"]["thread.name"] == loop else free).append(
                    (wait, c["end"] - envoy["start"])
                )
    assert len(held) >= 5 and all(wait >= left - 0.5 * MS for wait, left in held)  # read only when it returns
    assert free and p([wait for wait, _ in free], 50) < 1 * MS  # the pod's other loops go on (most are free)
    steady = table("steady", 0)
    parent = {x["i"]: x for x in steady}
    assert p([r["start"] - parent[r["parent"]]["start"] for r in roots(steady)], 99) < 3 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_history_burst_fills_the_worker_pool_and_the_jdbc_job_waits_for_a_thread() -> None:
    def waits(scenario):
        spans = table(scenario, 0)
        by_parent = kids(spans)
        run = run_ns(0)
        first = min(x["start"] for x in spans)
        inside, outside = [], []
        for r in roots(spans):
            (q,) = [c for c in by_parent[r["i"]] if c["name"] == sp.EVENTS_SPAN]
            at = (r["start"] - first) / run
            (inside if 0.38 < at < 0.45 else outside if at < 0.3 else []).append(q["start"] - r["start"])
        return inside, outside, len(named(spans, sp.HISTORY))

    inside, outside, flood = waits("worker-pool-burst")
    assert p(inside, 50) > 30 * MS and p(outside, 99) < 1 * MS
    assert flood > 4 * waits("steady")[2]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_zgc_allocation_stalls_grow_on_the_leaking_pod_only_and_seed_0_reports_them() -> None:
    spans = table("zgc-allocation-stalls", 0)
    (cause,) = vertx_hazelcast.truth("zgc-allocation-stalls", 0)
    marked = [r for r in roots(spans) if r["events"]]
    assert {r["instance"] for r in marked if any(ev[2]["duration_ms"] > 8 for ev in r["events"])} == set(
        cause.instances
    )
    assert {ev[1] for r in marked for ev in r["events"]} == {sp.STALL_EVENT["otlp"]}
    slow = [r for r in roots(spans) if r["duration"] > 80 * MS]
    assert len(slow) >= 10 and np.mean([r["instance"] in cause.instances for r in slow]) > 0.8
    stalls = sorted(
        {
            ev[0]: ev[2]["duration_ms"] for r in marked for ev in r["events"] if ev[2]["duration_ms"] > 8
        }.items()
    )
    run = run_ns(0)
    first = min(x["start"] for x in spans)
    early = [ms for t, ms in stalls if t - first < 0.5 * run]
    late = [ms for t, ms in stalls if t - first >= 0.5 * run]
    assert len(late) > len(early) > 0 and np.median(late) > np.median(early)  # the live set grows
    assert not [r for r in roots(table("steady", 0)) if any(ev[2]["duration_ms"] > 8 for ev in r["events"])]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_rolling_deploy_brings_new_jvms_that_run_interpreted_first() -> None:
    spans = table("rolling-deploy-cold-jit", 0)
    (cause,) = vertx_hazelcast.truth("rolling-deploy-cold-jit", 0)
    assemble = named(spans, sp.ASSEMBLE)
    new = {x["instance"] for x in assemble} - set(vertx_hazelcast.truth("worker-pool-burst", 0)[0].instances)
    assert new == set(cause.instances)
    for pod in cause.instances:
        mine = sorted((x for x in assemble if x["instance"] == pod), key=lambda x: x["start"])
        if len(mine) < 40:
            continue  # the last pod replaced serves the run's end only
        first, last = [x["duration"] for x in mine[:10]], [x["duration"] for x in mine[-15:]]
        assert np.median(first) > 4 * np.median(last)
    old = [x["duration"] for x in assemble if x["instance"] not in cause.instances]
    assert p(old, 95) < 3 * MS
    compiled = [x for x in assemble if x["events"]]  # seed 0: JFR's compilations as span events
    assert compiled and {x["instance"] for x in compiled} <= set(cause.instances)
    assert {ev[1] for x in compiled for ev in x["events"]} == {"jvm.jit.compilation"}
    assert len(compiled) <= 2 * len(cause.instances)  # once per tier per new JVM


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_bulk_update_empties_every_near_cache_and_the_misses_wait_on_busy_members(loaded) -> None:
    spans, _ = loaded[2]  # Zipkin: manual IMap spans, string tags
    first = min(x["start"] for x in spans)
    run = run_ns(2, 400)
    get_all = named(spans, "IMap.getAll")
    during = [x for x in get_all if 0.31 < (x["start"] - first) / run < 0.5]
    before = [x for x in get_all if (x["start"] - first) / run < 0.28]
    share = [
        int(x["attrs"]["hazelcast.near_cache.misses"]) / int(x["attrs"]["hazelcast.keys"]) for x in during
    ]
    assert np.median(share) > 0.3
    assert np.median([int(x["attrs"]["hazelcast.near_cache.misses"]) for x in before]) <= 4
    assert p([x["duration"] for x in during], 90) > 5 * p([x["duration"] for x in before], 90)
    assert {x["instance"] for x in during} == set(
        vertx_hazelcast.truth("near-cache-invalidation", 2)[0].instances
    )


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_operations_on_migrating_partitions_are_retried_after_the_pause() -> None:
    spans = table("partition-migration", 2)
    retried = [
        x
        for x in named(spans, "IMap.get") + named(spans, "IMap.getAll")
        if "hazelcast.invocation.retries" in x["attrs"]
    ]
    assert len(retried) >= 10 and min(x["duration"] for x in retried) > 950 * MS
    first = min(x["start"] for x in spans)
    assert min((x["start"] - first) / run_ns(2) for x in retried) > 0.19  # from when the member left
    steady = table("steady", 2)
    assert p([x["duration"] for x in named(steady, "IMap.getAll")], 99.9) < 100 * MS
    assert not [x for x in named(steady, "IMap.getAll") if "hazelcast.invocation.retries" in x["attrs"]]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_breaker_rejects_at_once_with_uo_and_the_client_backs_off_before_retrying(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger: Envoy's egress spans
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    rejected = [x for x in named(spans, sp.INFER, "Client") if x["status"] == "Error"]
    assert len(rejected) >= 20
    for call in rejected:
        (envoy,) = by_parent[call["id"]]
        assert envoy["attrs"]["response_flags"] == "UO" and envoy["duration"] < 2 * MS
        assert envoy["id"] not in by_parent  # never reached a model server
        siblings = sorted(
            (x for x in by_parent[call["parent"]] if x["name"] == sp.INFER), key=lambda x: x["start"]
        )
        later = [x for x in siblings if x["start"] > call["start"]]
        if later:
            assert later[0]["start"] - call["end"] > 18 * MS  # backoff: 40 ms x 2^n, jittered 0.5-1.5
            assert int(later[0]["attrs"]["reco.retry.attempt"]) >= 1
    assert len([x for x in named(table("steady", 1), sp.INFER, "Client") if x["status"] == "Error"]) < 5


def _queue_ms(spans, after: float = 0.0) -> dict[str, list[float]]:
    """Per model-server host: the batcher's wait (SERVER start to the compute span's start), for the
    calls from `after` (a share of the run) on."""
    by_parent = kids(spans)
    first = min(x["start"] for x in spans)
    out: dict[str, list[float]] = {}
    for s in named(spans, sp.INFER, "Server"):
        if s["start"] - first < after * run_ns(2):
            continue
        for c in by_parent.get(s["i"], []):
            out.setdefault(s["instance"], []).append((c["start"] - s["start"]) / MS)
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_outlier_ejection_fails_fast_on_one_host_then_the_others_queue() -> None:
    spans = table("outlier-ejection", 2)
    (cause,) = vertx_hazelcast.truth("outlier-ejection", 2)
    failed = [x for x in named(spans, sp.INFER, "Server") if x["status"] == "Error"]
    broken = {x["instance"] for x in failed}
    assert len(broken) == 1 and not broken & set(cause.instances) and len(failed) >= 5
    assert len(failed) <= 5 * vertx_hazelcast.setup(2)["pods"] + 6  # each Envoy ejects after 5 in a row
    assert max(x["duration"] for x in failed) < 5 * MS
    queued, steady = _queue_ms(spans, 0.45), _queue_ms(table("steady", 2), 0.45)
    assert broken.pop() not in queued  # ejected everywhere
    for host in cause.instances:
        assert np.mean(queued[host]) > 1.25 * np.mean(steady[host])  # 4 hosts: the 3 left take 4/3 the load
        assert len(queued[host]) > 1.2 * len(steady[host])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_long_max_queue_delay_at_low_traffic_makes_every_inference_wait_it_out() -> None:
    spans = table("batcher-max-delay", 2)
    waits = [w for v in _queue_ms(spans).values() for w in v]
    assert 20 < np.median(waits) < 26 and np.mean(np.asarray(waits) > 12) > 0.7  # the first of a batch: 25 ms
    sizes = [x["attrs"]["triton.batch_size"] for x in named(spans, sp.COMPUTE)]
    assert np.mean(sizes) < 3 and max(sizes) < 8  # a batch never fills: the delay runs out first
    assert np.median([w for v in _queue_ms(table("steady", 2)).values() for w in v]) < 3


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_larger_model_computes_longer_at_every_batch_size() -> None:
    def by_size(scenario):
        out: dict[int, list[float]] = {}
        for x in named(table(scenario, 2), sp.COMPUTE):
            out.setdefault(x["attrs"]["triton.batch_size"], []).append(x["duration"])
        return out

    big, steady = by_size("larger-model"), by_size("steady")
    for size in (1, 2):
        assert np.median(big[size]) > 1.3 * np.median(steady[size])
    assert {x["attrs"]["model_version"] for x in named(table("larger-model", 2), sp.INFER, "Server")} == {"4"}


_ON_SEED_0 = (
    "eventloop-blocking-jdbc",
    "worker-pool-burst",
    "zgc-allocation-stalls",
    "rolling-deploy-cold-jit",
    "breaker-overflow-burst",
)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(
    ("seed", "scenarios"),
    [(0, _ON_SEED_0), (2, tuple(x for x in vertx_hazelcast.SINGLES if x not in _ON_SEED_0))],
)
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    def p99(scenario):
        return p([r["duration"] for r in roots(table(scenario, seed))], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "zgc-allocation-stalls":
        return any(ev[2]["duration_ms"] > 8 for r in roots(spans) for ev in r["events"])
    if part == "outlier-ejection":
        return len([x for x in named(spans, sp.INFER, "Server") if x["status"] == "Error"]) >= 5
    if part == "rolling-deploy-cold-jit":
        return len({r["instance"] for r in roots(spans)}) > vertx_hazelcast.setup(seed)["pods"]
    if part == "larger-model":
        return {x["attrs"]["model_version"] for x in named(spans, sp.INFER, "Server")} == {"4"}
    if part == "near-cache-invalidation":
        return (
            max(x["attrs"]["hazelcast.near_cache.misses"] for x in named(spans, sp.HZ_NAMES["withspan"][1]))
            > 25
        )
    assert part == "partition-migration"
    return any("hazelcast.invocation.retries" in x["attrs"] for x in named(spans, sp.HZ_NAMES["withspan"][1]))


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", vertx_hazelcast.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    truth = vertx_hazelcast.truth(pair, 0)
    assert [c.pattern for c in truth] == [vertx_hazelcast.truth(x, 0)[0].pattern for x in parts]
    both, steady = table(pair, 0, 500), table("steady", 0, 500)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
