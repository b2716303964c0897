"""The blind family `dotnet-onnx` (reference_pipeline/simulate/dotnet_onnx.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way the .NET ThreadPool, Server GC, a CFS
quota, a SemaphoreSlim, a multiplexed Redis connection, SqlClient's pool, Polly's timeouts, retries and
breaker, tiered JIT or a bigger model would produce it (a steady run of the same seed does not). Three
runs go through the loader; the other mechanisms are read from the generated table."""

from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pytest

from reference_pipeline.simulate import blind, dotnet_onnx
from reference_pipeline.simulate import dotnet_onnx_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_dotnet_onnx.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "dotnet-onnx"


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(dotnet_onnx, scenario, requests, seed)


def run_ns(requests: int, seed: int) -> float:
    return requests / dotnet_onnx.setup(seed)["rps"] * 1e9


def roots(spans, seed: int) -> list[dict]:
    return named(spans, dotnet_onnx.style(seed).root, "Server", sp.API)


def edge(spans, seed: int) -> list[dict]:
    return named(spans, dotnet_onnx.style(seed).gateway_root, "Server", sp.GATEWAY)


def p99(scenario: str, seed: int, requests: int = 2000) -> float:
    return p([x["duration"] for x in edge(spans_of(scenario, requests, seed), seed)], 99)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("dotnet-onnx")
    runs = {0: ("gen2-loh-compaction", 700), 1: ("risk-service-slow", 500), 2: ("redis-large-values", 600)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == dotnet_onnx.SCENARIOS  # open now
    assert sum("+" in sc for sc in dotnet_onnx.SCENARIOS) == 3 and dotnet_onnx.SCENARIOS[0] == "steady"
    assert 9 <= len(dotnet_onnx.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, st = dotnet_onnx.setup(seed), dotnet_onnx.style(seed)
        assert summary["format"] == s["fmt"]
        assert {x["service"] for x in spans} == {sp.API, sp.GATEWAY}
        api_roots = [x for x in spans if x["service"] == sp.API and x["kind"] == "Server"]
        gw = [x for x in spans if x["service"] == sp.GATEWAY and x["kind"] == "Server"]
        assert len(api_roots) == len(gw) == summary["requests"]
        assert all(x["parent"] for x in api_roots) and not any(x["parent"] for x in gw)
        db = next(x for x in spans if x["name"].lower() == sp.DB.lower())["attrs"]
        assert ("db.query.text" in db and "server.address" in db) == (s["semconv"] == "new")
        assert ("db.statement" in db and "net.peer.name" in db) == (s["semconv"] == "old")
        names = {x["name"].lower() for x in spans}
        assert (sp.FEATURES.lower() in names) == s["internals"] == (sp.DECISION.lower() in names)
        assert {sp.TOKENIZE.lower(), sp.ONNX.lower(), "get", st.root.lower()} <= names
        pods = {x["instance"] for x in api_roots}
        assert len(pods) == s["pods"]
        assert ("service.instance.id" in api_roots[0]["resource"]) == (s["ident"] == "instance-id")
        runtime = [e["Name"] for x in api_roots for e in x["events"]]
        assert bool(runtime) == s["runtime_events"]
        assert set(runtime) <= {"dotnet.gc", "dotnet.threadpool.adjustment"}
        redis = [e["Name"] for x in spans if x["name"].lower() == "get" for e in x["events"]]
        assert set(redis) == {"Enqueued", "Sent", "ResponseReceived"}
        for scenario in dotnet_onnx.SCENARIOS:
            for cause in dotnet_onnx.truth(scenario, seed):
                assert cause.span.lower() in names or scenario.startswith("hpa"), (scenario, cause)
                if not scenario.startswith("hpa"):
                    assert set(cause.instances) <= pods, (scenario, cause)
                assert cause.stage in (None, "queue", "feature_hydration", "preprocessing", "model_forward",
                                       "downstream")
    with pytest.raises(ValueError, match="unknown dotnet-onnx scenario"):
        dotnet_onnx.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_blocking_gen2_pauses_stop_one_pod_and_are_reported_as_span_events(loaded) -> None:
    spans, _ = loaded[0]
    (cause,) = dotnet_onnx.truth("gen2-loh-compaction", 0)
    api = [x for x in spans if x["service"] == sp.API and x["kind"] == "Server"]
    gen2 = [(x, e) for x in api for e in x["events"] if e["Attributes"].get("gc.generation") == "2"]
    assert len(gen2) >= 2 and {x["instance"] for x, _ in gen2} == set(cause.instances)
    # every request in flight when the pause began is stretched by all of it
    assert all(x["duration"] >= float(e["Attributes"]["gc.pause.ms"]) * MS for x, e in gen2)
    assert all(e["Attributes"]["gc.compacting"] == "true" for _, e in gen2)
    # requests that arrive during a pause start when it ends: long waits before the server span, one pod
    by_id = {x["id"]: x for x in spans}
    held = [x for x in api if x["start"] - by_id[x["parent"]]["start"] > 90 * MS]
    assert len(held) >= 5 and {x["instance"] for x in held} == set(cause.instances)
    steady = roots(spans_of("steady", 2000, 0), 0)
    assert not any(e[2]["gc.generation"] == 2 for r in steady for e in r["events"])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_slow_risk_attempts_are_cancelled_at_300_ms_and_retried_after_a_back_off(loaded) -> None:
    spans, _ = loaded[1]
    st = dotnet_onnx.style(1)
    calls = [x for x in spans if x["name"] == st.http_client and x["service"] == sp.API]
    failed = [x for x in calls if x["status"] == "Error"]
    assert len(failed) > 0.05 * len(calls)
    assert all(299 * MS < x["duration"] < 330 * MS for x in failed)
    by_parent: dict[str, list[dict]] = {}
    for x in calls:
        by_parent.setdefault(x["parent"], []).append(x)
    gaps = []
    for tries in by_parent.values():
        tries.sort(key=lambda x: x["start"])
        gaps += [b["start"] - a["end"] for a, b in pairwise(tries) if a["status"] == "Error"]
    assert len(gaps) > 10 and p(gaps, 10) > 20 * MS and p(gaps, 90) < 160 * MS
    steady = named(spans_of("steady", 2000, 1), st.http_client, "Client", sp.API)
    assert not any(x["status"] == "Error" for x in steady)
    assert p([x["duration"] for x in steady], 99) < 120 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_large_redis_replies_delay_the_replies_queued_behind_them_on_the_same_pod(loaded) -> None:
    spans, _ = loaded[2]
    gets = [x for x in spans if x["name"].lower() == "get"]
    slow = [x for x in gets if x["duration"] > 20 * MS]
    assert len(slow) > 0.06 * len(gets)
    # head-of-line: a slow reply on a pod overlaps an earlier slow reply's transfer on that pod
    by_pod: dict[str, list[dict]] = {}
    for x in slow:
        by_pod.setdefault(x["instance"], []).append(x)
    behind = 0
    for mine in by_pod.values():
        mine.sort(key=lambda x: x["end"])
        behind += sum(b["start"] < a["end"] for a, b in pairwise(mine))
    assert behind > 5
    steady = [x["duration"] for x in spans_of("steady", 2000, 2) if x["name"] == sp.REDIS_GET]
    assert p(steady, 99) < 10 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_sync_over_async_under_a_burst_starves_the_pool_then_recovers() -> None:
    spans = spans_of("sync-over-async-burst", 2000, 0)
    parent = {x["i"]: x for x in spans}
    run = run_ns(2000, 0)  # the burst: 30-50 % of the nominal run (arrivals compress: deciles 3-5)
    first = min(x["start"] for x in spans)
    waits: dict[int, list[float]] = {}
    took: dict[int, list[float]] = {}
    for r in roots(spans, 0):
        client = parent[r["parent"]]
        decile = min(9, int((client["start"] - first) / run * 10))
        waits.setdefault(decile, []).append(r["start"] - client["start"])  # Kestrel waits for a thread
        took.setdefault(decile, []).append(client["duration"])
    assert p(waits[0] + waits[1] + waits[2], 99) < 5 * MS and p(took[1], 90) < 60 * MS
    assert p(waits[4], 50) > 50 * MS and p(waits[4], 90) > 150 * MS and p(took[4], 50) > 500 * MS
    assert p(waits[6], 90) < 5 * MS and p(took[6], 90) < 60 * MS  # recovered: the pool has grown
    events = [e for r in roots(spans, 0) for e in r["events"] if e[1] == "dotnet.threadpool.adjustment"]
    assert len(events) > 5
    steady = spans_of("steady", 2000, 0)
    sparent = {x["i"]: x for x in steady}
    assert p([r["start"] - sparent[r["parent"]]["start"] for r in roots(steady, 0)], 99) < 5 * MS
    assert not any(e[1] == "dotnet.threadpool.adjustment" for r in roots(steady, 0) for e in r["events"])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_lowered_cpu_limit_stalls_work_until_a_period_boundary() -> None:
    spans = spans_of("cpu-limit-lowered", 2000, 1)
    onnx = named(spans, sp.ONNX)
    stalled = [x["end"] % 100_000_000 for x in onnx if x["duration"] > 20 * MS]
    assert len(stalled) > 20
    bins = np.bincount(np.asarray(stalled) // 10_000_000, minlength=10)
    assert bins[0] / len(stalled) > 0.5  # they end within 10 ms after a boundary
    steady = [x["duration"] for x in named(spans_of("steady", 2000, 1), sp.ONNX)]
    assert p(steady, 99) < 12 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_longer_merchant_texts_hold_the_tokenizer_lock_and_requests_wait_for_it() -> None:
    spans = spans_of("longer-merchant-texts", 2000, 2)
    tok = named(spans, sp.TOKENIZE)
    length = np.array([x["attrs"]["merchant.text.length"] for x in tok])
    assert np.median(length) > 800
    # the span covers the wait and the work; the work grows with the text, the wait with the others'
    work = np.array([(0.05 + 0.012 * n) * MS for n in length])
    wait = np.array([x["duration"] for x in tok]) - work
    assert p(wait, 90) > 20 * MS
    steady = named(spans_of("steady", 2000, 2), sp.TOKENIZE)
    assert p([x["duration"] for x in steady], 99) < 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_blocking_transaction_holds_the_pool_and_later_requests_wait_for_a_connection() -> None:
    spans = spans_of("blocking-transaction", 2000, 0)
    inserts = [x for x in named(spans, sp.DB) if "INSERT" in x["attrs"]["db.query.text"]]
    blocked = [x for x in inserts if x["duration"] > 500 * MS]
    assert len(blocked) >= 100
    ends = np.array([x["end"] for x in blocked])
    assert np.ptp(ends) < 200 * MS * 10  # released together when the lock goes
    saves = named(spans, sp.DECISION)
    by_parent = kids(spans)
    pool_waits = [c["start"] - s["start"] for s in saves for c in by_parent[s["i"]]]
    assert max(pool_waits) > 500 * MS
    steady = named(spans_of("steady", 2000, 0), sp.DECISION)
    assert p([x["duration"] for x in steady], 99) < 30 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_open_breaker_answers_the_default_score_at_once_after_the_retries_that_opened_it() -> None:
    spans = spans_of("risk-outage-breaker", 2000, 2)
    st = dotnet_onnx.style(2)
    rs = roots(spans, 2)
    default = [r for r in rs if r["attrs"]["fraud.risk.source"] == "default"]
    assert len(default) > 0.4 * len(rs)
    by_parent = kids(spans)
    calls = {r["i"]: [c for c in by_parent[r["i"]] if c["name"] == st.http_client] for r in rs}
    fast = [r for r in default if not calls[r["i"]]]
    tried = [r for r in default if len(calls[r["i"]]) == 3]
    assert len(fast) > 0.3 * len(rs) and len(tried) > 20
    answered = [r["duration"] for r in rs if calls[r["i"]] and r not in tried]
    assert p([r["duration"] for r in fast], 50) < p(answered, 50)
    assert min(r["duration"] for r in tried) > 900 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_new_pods_after_a_scale_out_are_slow_at_first_and_warm_up() -> None:
    spans = spans_of("hpa-scale-out", 2000, 1)
    (cause,) = dotnet_onnx.truth("hpa-scale-out", 1)
    rs = sorted(roots(spans, 1), key=lambda x: x["start"])
    new = [r for r in rs if r["instance"] in cause.instances]
    assert {r["instance"] for r in new} == set(cause.instances)
    for pod in cause.instances:
        mine = [r["duration"] for r in new if r["instance"] == pod]
        assert np.median(mine[:10]) > 3 * np.median(mine[-40:])
    old = [r["duration"] for r in rs if r["instance"] not in cause.instances]
    assert p([r["duration"] for r in new], 99) > 2 * p(old, 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_larger_model_makes_every_inference_slower() -> None:
    v2 = named(spans_of("model-v2-larger", 2000, 0), sp.ONNX)
    v1 = named(spans_of("steady", 2000, 0), sp.ONNX)
    assert {x["attrs"]["model.version"] for x in v2} == {"2.0.0"}
    assert {x["attrs"]["model.version"] for x in v1} == {"1.4.2"}
    assert p([x["duration"] for x in v2], 5) > 3 * p([x["duration"] for x in v1], 95)


# each single's p99 is checked at 2,000 requests on one seed (the mechanism tests read the same runs)
P99_SEEDS = {0: ("sync-over-async-burst", "blocking-transaction", "model-v2-larger", "gen2-loh-compaction"),
             1: ("cpu-limit-lowered", "hpa-scale-out", "risk-service-slow"),
             2: ("longer-merchant-texts", "risk-outage-breaker", "redis-large-values")}


def test_the_p99_seeds_cover_every_single() -> None:
    assert sorted(sc for group in P99_SEEDS.values() for sc in group) == sorted(dotnet_onnx.SINGLES)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("seed", sorted(P99_SEEDS))
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int) -> None:
    base = p99("steady", seed)
    for scenario in P99_SEEDS[seed]:
        assert p99(scenario, seed) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    st = dotnet_onnx.style(seed)
    rs = roots(spans, seed)
    if part == "gen2-loh-compaction":  # CPU-only spans stretched by a pause, on that pod only
        slow = {r["instance"] for r in named(spans, sp.ONNX) if r["duration"] > 90 * MS}
        return slow == set(dotnet_onnx.truth(part, seed)[0].instances)
    if part == "redis-large-values":
        return p([x["duration"] for x in named(spans, sp.REDIS_GET)], 95) > 20 * MS
    if part == "longer-merchant-texts":
        return np.median([x["attrs"]["merchant.text.length"] for x in named(spans, sp.TOKENIZE)]) > 800
    if part == "model-v2-larger":
        return {x["attrs"]["model.version"] for x in named(spans, sp.ONNX)} == {"2.0.0"}
    if part == "risk-service-slow":
        return sum(x["status"] == "Error" for x in named(spans, st.http_client, "Client", sp.API)) > 20
    assert part == "sync-over-async-burst"
    parent = {x["i"]: x for x in spans}
    return max(r["start"] - parent[r["parent"]]["start"] for r in rs) > 200 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", dotnet_onnx.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in dotnet_onnx.truth(pair, 0)] == [dotnet_onnx.truth(x, 0)[0].pattern
                                                                for x in parts]
    both, steady = spans_of(pair, 1000, 0), spans_of("steady", 2000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
