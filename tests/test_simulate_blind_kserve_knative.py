"""The blind family `kserve-knative` (simulate/kserve_knative.py; open since its scores): each
seed's format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way a KPA panic with cold
pods, a slow canary revision, containerConcurrency 1 behind the activator, a blocked event loop,
Redis evictions, OpenMP threads under a CFS quota, CPython's and G1's full collections, large JSON
batches or an ingress gateway's retries during evictions would produce it (a steady run of the same
seed does not). Three runs go through the loader; the mechanisms are read from the generated table,
to keep the file fast."""

from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pytest

from reference_pipeline.simulate import blind
from reference_pipeline.simulate import kserve_knative as kk
from reference_pipeline.simulate import kserve_knative_spans as sp
from tests.blind_support import instance_label, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_kserve_knative.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "kserve-knative"
PHYSICS = pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")


@cache
def spans_of(scenario: str, seed: int, requests: int = 2000) -> tuple[dict, ...]:
    return table_span_dicts(kk, scenario, requests, seed)


def roots(spans) -> list[dict]:
    return [s for s in spans if s["parent"] == -1]


def durations(spans) -> list[float]:
    return [s["duration"] for s in spans]


def of(spans, name: str, service: str, kind: str | None = None) -> list[dict]:
    return named(spans, name, kind, service)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp(FAMILY)
    runs = {0: "canary-slow-model", 1: "canary-slow-model+termination-retry", 2: "canary-slow-model"}
    return {seed: load_run(tmp, FAMILY, scenario, 450, seed) for seed, scenario in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(
        loaded, tmp_path) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.MODULES[FAMILY] == "kserve_knative"
    assert FAMILY in blind.available() and blind.scenarios(FAMILY) == kk.SCENARIOS
    assert kk.SCENARIOS[0] == "steady" and not kk.truth("steady", 0)
    assert len(kk.SINGLES) == 10 and len(kk.PAIRS) == 3 and len(kk.SCENARIOS) == 14
    assert {kk.setup(seed)["fmt"] for seed in (0, 1, 2)} == {"otlp-json", "jaeger", "zipkin"}
    for seed, (spans, summary) in loaded.items():
        s, st = kk.setup(seed), kk.style(seed)
        assert summary["format"] == s["fmt"] and summary["requests"] == 450
        top = [x for x in spans if not x["parent"]]
        assert len(top) == 450 and {x["name"].lower() for x in top} == {sp.AUTHORIZE.lower()}
        services = {x["service"] for x in spans}
        expect = {sp.API, sp.TRANSFORMER, sp.PREDICTOR}
        expect |= {sp.ACTIVATOR, sp.QUEUE} if st.knative else set()
        expect |= {sp.GATEWAY} if st.gateway else set()
        expect |= {sp.FEATURES} if st.feature_spans else set()
        assert services == expect, seed
        names = {x["name"].lower() for x in spans}
        assert {st.step(op).lower() for op in ("preprocess", "predict", "postprocess")} <= names
        assert st.route.lower() in names and ("/v2/" in st.route) == (s["protocol"] == "v2")
        attrs = top[0]["attrs"]
        assert ("http.request.method" in attrs) == (s["semconv"] == "new") != ("http.method" in attrs)
        assert ("service.instance.id" in top[0]["resource"]) == (s["ident"] == "pod")
        label = {x["service"]: set() for x in spans}
        for x in spans:
            label[x["service"]].add(instance_label(x["resource"]))
        server = [x for x in spans if x["service"] == sp.TRANSFORMER and x["kind"] == "Server"]
        assert ("process.runtime.cpython.gc_count.gen2" in server[0]["attrs"]) == (s["py_gc"] == "attrs")
        if s["py_gc"] != "events":
            assert not any(sp.PY_GC_EVENT in (x["events"] or "") for x in server)
        if s["jvm_gc"] != "events":
            assert not any(x["events"] not in (None, "", "[]") for x in top)
        assert label[sp.API] == set(kk.instances(seed, sp.API))
        assert label[sp.TRANSFORMER] >= set(kk.instances(seed, sp.TRANSFORMER))
        for scenario in kk.SCENARIOS:
            for cause in kk.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                have = label[cause.service] | (
                    set(kk.instances(seed, sp.PREDICTOR)) if cause.service == sp.PREDICTOR else set())
                assert cause.instances and set(cause.instances) <= have, (scenario, cause)
                assert cause.stage in (None, "ingress", "queue", "feature_hydration", "preprocessing",
                                       "model_forward")
        assert set(kk.truth("canary-slow-model", seed)[0].instances) < label[sp.PREDICTOR]
    spans, _ = loaded[1]  # Jaeger: the gateway's one span per request, retries inside it
    gw = [x for x in spans if x["service"] == sp.GATEWAY]
    assert len(gw) == 450 and kk.truth("termination-retry", 1)[0].span == sp.GATEWAY_SPAN
    assert any(x["duration"] > 200 * MS for x in gw)  # an attempt waited out the connect timeout
    with pytest.raises(ValueError, match="unknown kserve-knative scenario"):
        kk.truth("healthy", 0)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    blind.write_run(a, FAMILY, "jvm-gc+loop-blocking", 120, 4)
    blind.write_run(b, FAMILY, "jvm-gc+loop-blocking", 120, 4)
    assert a.read_bytes() == b.read_bytes()


@PHYSICS
def test_a_flash_sale_panics_the_kpa_and_its_new_pods_start_late_and_cold() -> None:
    spans = spans_of("panic-scale-up", 0)
    (cause,) = kk.truth("panic-scale-up", 0)
    throttled = of(spans, sp.THROTTLER_TRY, sp.ACTIVATOR)
    assert p(durations(throttled), 99) > 50 * MS and cause.span == sp.THROTTLER_TRY
    compute = of(spans, "predict", sp.PREDICTOR)
    first: dict[str, float] = {}
    for x in sorted(compute, key=lambda x: x["start"]):
        first.setdefault(x["instance"], x["start"])
    old = set(kk.instances(0, sp.PREDICTOR))
    new = {k: t for k, t in first.items() if k not in old}
    run = max(x["end"] for x in spans)
    assert len(new) >= 2 and min(new.values()) > 0.3 * run  # ready seconds after the burst began
    cold = [x["duration"] for x in compute if x["instance"] in new and x["start"] < new[x["instance"]] + 1e9]
    assert max(cold) > 150 * MS
    steady = spans_of("steady", 0)
    assert {x["instance"] for x in of(steady, "predict", sp.PREDICTOR)} == old
    assert p(durations(of(steady, sp.THROTTLER_TRY, sp.ACTIVATOR)), 99) < 5 * MS


@PHYSICS
def test_the_canary_revision_takes_a_tenth_of_the_calls_and_computes_three_times_longer() -> None:
    spans = spans_of("canary-slow-model", 1)
    (cause,) = kk.truth("canary-slow-model", 1)
    compute = of(spans, cause.span, sp.PREDICTOR)
    canary = [x["duration"] for x in compute if x["instance"] in cause.instances]
    stable = [x["duration"] for x in compute if x["instance"] not in cause.instances]
    assert 0.06 < len(canary) / len(compute) < 0.14
    assert p(canary, 50) > 2.5 * p(stable, 50)


@PHYSICS
def test_concurrency_one_lets_each_pod_serve_one_request_while_the_activator_holds_the_rest() -> None:
    spans = spans_of("concurrency-one", 0)
    served: dict[str, list[tuple[float, float]]] = {}
    for x in of(spans, sp.QUEUE_PROXY, sp.QUEUE):
        if x["instance"] in kk.instances(0, sp.PREDICTOR):
            served.setdefault(x["instance"], []).append((x["start"], x["end"]))
    for xs in served.values():
        xs.sort()
        assert all(b[0] >= a[1] - 0.2 * MS for a, b in pairwise(xs))
    held = durations(of(spans, sp.THROTTLER_TRY, sp.ACTIVATOR))
    steady = durations(of(spans_of("steady", 0), sp.THROTTLER_TRY, sp.ACTIVATOR))
    assert p(held, 90) > 5 * MS and p(held, 90) > 10 * p(steady, 90)


@PHYSICS
def test_velocity_features_block_the_loop_on_seed_0_and_queue_in_the_pool_on_seed_2() -> None:
    blocked, steady = spans_of("loop-blocking", 0), spans_of("steady", 0)
    pre = durations(of(blocked, "preprocess", sp.TRANSFORMER))
    assert p(pre, 50) > 2 * p(durations(of(steady, "preprocess", sp.TRANSFORMER)), 50)

    def waits(spans):  # the predictor call as the transformer sees it, less the activator's span
        calls = {x["i"]: x for x in spans
                 if x["service"] == sp.TRANSFORMER and x["name"] in ("POST", "HTTP POST")}
        return [calls[x["parent"]]["duration"] - x["duration"]
                for x in of(spans, sp.ACTIVATOR_PROXY, sp.ACTIVATOR) if x["parent"] in calls]

    assert p(waits(blocked), 99) > 4 * p(waits(steady), 99)  # responses wait for the loop
    pooled, steady2 = spans_of("loop-blocking", 2), spans_of("steady", 2)
    assert p(waits(pooled), 99) < 2 * p(waits(steady2), 99)  # the loop stays free
    assert p(durations(of(pooled, "preprocess", sp.TRANSFORMER)), 90) > 3 * p(
        durations(of(steady2, "preprocess", sp.TRANSFORMER)), 90)


@PHYSICS
def test_evictions_send_a_fifth_of_the_keys_to_the_history_table() -> None:
    spans = spans_of("redis-evictions", 0)
    server = of(spans, sp.GET_FEATURES, sp.FEATURES, "Server")
    missed = [x for x in server if x["attrs"]["feature.redis.misses"] > 0]
    assert 0.35 < len(missed) / len(server) < 0.65 and p(durations(missed), 50) > 10 * MS
    steady = of(spans_of("steady", 0), sp.GET_FEATURES, sp.FEATURES, "Server")
    assert sum(x["attrs"]["feature.redis.misses"] > 0 for x in steady) < 0.02 * len(steady)


@PHYSICS
def test_openmp_threads_spend_the_quota_early_in_each_period_on_one_pod_only() -> None:
    spans = spans_of("omp-throttling", 0)
    (cause,) = kk.truth("omp-throttling", 0)
    compute = of(spans, "predict", sp.PREDICTOR)
    hit = [x["duration"] for x in compute if x["instance"] in cause.instances]
    other = [x["duration"] for x in compute if x["instance"] not in cause.instances]
    assert p(hit, 50) < p(other, 50)  # 32 threads are fast while quota lasts
    assert p(hit, 95) > 40 * MS and max(hit) < 250 * MS and p(other, 99) < 40 * MS  # then wait a period


@PHYSICS
def test_a_leaking_cache_makes_long_full_collections_on_two_transformer_pods() -> None:
    spans = spans_of("python-gc", 0)
    (cause,) = kk.truth("python-gc", 0)
    server = of(spans, kk.style(0).route, sp.TRANSFORMER, "Server")
    long_gc = [x for x in server if any(ev[1] == sp.PY_GC_EVENT and ev[2]["gc.duration_ms"] > 60
                                        for ev in x["events"])]
    assert len(long_gc) >= 10 and {x["instance"] for x in long_gc} <= set(cause.instances)
    hit = [x["duration"] for x in server if x["instance"] in cause.instances]
    rest = [x["duration"] for x in server if x["instance"] not in cause.instances]
    assert p(hit, 99) > 2 * p(rest, 99)


@PHYSICS
def test_full_g1_collections_stretch_the_roots_of_two_api_pods_with_jfr_events() -> None:
    spans = spans_of("jvm-gc", 1)
    (cause,) = kk.truth("jvm-gc", 1)
    top = roots(spans)
    hit = [x for x in top if x["instance"] in cause.instances]
    rest = [x for x in top if x["instance"] not in cause.instances]
    assert p(durations(hit), 99) > 1.4 * p(durations(rest), 99)
    full = [x for x in hit if any(ev[2]["jvm.gc.duration_ms"] > 200 for ev in x["events"])]
    assert full and not any(ev[2]["jvm.gc.duration_ms"] > 20 for x in rest for ev in x["events"])


@PHYSICS
def test_rescoring_batches_are_large_and_take_time_with_their_rows() -> None:
    spans = spans_of("large-batch", 2)
    server = {x["i"]: x for x in of(spans, kk.style(2).route, sp.TRANSFORMER, "Server")}
    by_trace = {x["trace"]: x for x in server.values()}
    batches = [x for x in roots(spans) if x["name"] == sp.RESCORE]
    assert 0.006 < len(batches) / len(roots(spans)) < 0.025
    rows = [by_trace[x["trace"]]["attrs"]["kserve.instances"] for x in batches]
    assert min(rows) >= 100 and np.corrcoef(rows, durations(batches))[0, 1] > 0.6
    assert p(durations(batches), 50) > 5 * p(durations(roots(spans)), 50)
    assert not [x for x in roots(spans_of("steady", 2)) if x["name"] == sp.RESCORE]


@PHYSICS
def test_evictions_make_the_gateway_retry_on_another_pod_and_replacements_start() -> None:
    spans = spans_of("termination-retry", 1)
    gw = {x["i"]: x for x in of(spans, sp.GATEWAY_SPAN, sp.GATEWAY)}
    route = kk.style(1).route
    late = [x["start"] - gw[x["parent"]]["start"] for x in of(spans, route, sp.TRANSFORMER, "Server")
            if x["parent"] in gw]
    assert sum(d > 240 * MS for d in late) >= 5  # waited out the 250 ms connect timeout, then retried
    assert sum(2 * MS < d < 60 * MS for d in late) >= 10  # refused, then the jittered backoff
    pods = {x["instance"].rsplit(":", 1)[0] for x in spans if x["service"] == sp.TRANSFORMER}
    assert len(pods) > kk.TRANSFORMER_PODS  # the evicted pods' replacements served
    steady = spans_of("steady", 1)
    gw = {x["i"]: x for x in of(steady, sp.GATEWAY_SPAN, sp.GATEWAY)}
    assert max(x["start"] - gw[x["parent"]]["start"] for x in of(steady, route, sp.TRANSFORMER, "Server")
               if x["parent"] in gw) < 40 * MS


@PHYSICS
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int) -> None:
    def p99(scenario):
        return p(durations(roots(spans_of(scenario, seed))), 99)

    base = p99("steady")
    for scenario in kk.SCENARIOS[1:]:
        assert p99(scenario) > 1.15 * base, scenario


@PHYSICS
def test_a_two_cause_run_has_both_mechanisms() -> None:
    both = spans_of("panic-scale-up+redis-evictions", 0)
    server = of(both, sp.GET_FEATURES, sp.FEATURES, "Server")
    assert sum(x["attrs"]["feature.redis.misses"] > 0 for x in server) > 0.3 * len(server)
    assert len({x["instance"] for x in of(both, "predict", sp.PREDICTOR)}) > 2
    both = spans_of("jvm-gc+loop-blocking", 1)
    (gc, _) = kk.truth("jvm-gc+loop-blocking", 1)
    assert any(ev[2]["jvm.gc.duration_ms"] > 200 for x in roots(both) for ev in x["events"]
               if x["instance"] in gc.instances)
    pre = kk.style(1).step("preprocess")
    assert p(durations(of(both, pre, sp.TRANSFORMER)), 50) > 2 * p(
        durations(of(spans_of("steady", 1), pre, sp.TRANSFORMER)), 50)
    both = spans_of("canary-slow-model+termination-retry", 2)
    canary = kk.truth("canary-slow-model", 2)[0].instances
    assert any(x["instance"] in canary for x in of(both, "predict", sp.PREDICTOR))
    pods = {x["instance"] for x in both if x["service"] == sp.QUEUE}
    assert len(pods) > len(pods & set(kk.instances(2, sp.PREDICTOR) + canary))  # the replacements' sidecars
