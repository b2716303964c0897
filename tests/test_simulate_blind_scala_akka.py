"""The blind family `scala-akka` (reference_pipeline/simulate/scala_akka.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way an entity's mailbox, a starved
dispatcher, a shard hand-off and journal replay, a circuit breaker, a growing geo radius, G1, CFS
periods, a cold JIT, a Kafka leader move or a lossy link would produce it (a steady run of the same seed
does not). Three runs go through the loader; the other mechanisms are read from the generated table, to
keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, scala_akka
from reference_pipeline.simulate import scala_akka_spans as sp
from reference_pipeline.simulate.scala_akka_flow import HOT, PARTITIONS
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth, same bytes): its
# physics tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_scala_akka.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)
PHYSICS = pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
MS = 1e6
FAMILY = "scala-akka"
N = 1000  # requests per table run


@cache
def table(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(scala_akka, scenario, requests, seed)


def roots(spans) -> list[dict]:
    return [x for x in spans if x["parent"] == -1 and x["service"] == sp.API]


def run_ns(requests: int, seed: int) -> float:
    return requests / scala_akka.setup(seed)["rps"] * 1e9


def labels(seed: int, key: str, generation: int = 0) -> set[str]:
    st = scala_akka.style(seed)
    return {st.label(sp.API, k, generation) for k in scala_akka.special_nodes(seed)[key]}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("scala-akka")
    runs = {0: ("hot-restaurant-lunch", 300), 1: ("shard-rebalance", 300), 2: ("traffic-breaker", 300)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == scala_akka.SCENARIOS  # open now
    assert sum("+" in sc for sc in scala_akka.SCENARIOS) == 3 and scala_akka.SCENARIOS[0] == "steady"
    assert 9 <= len(scala_akka.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, st = scala_akka.setup(seed), scala_akka.style(seed)
        assert summary["format"] == s["fmt"]
        assert {x["service"] for x in spans} == {sp.API, sp.TRAFFIC}
        top = [x for x in spans if not x["parent"]]
        assert len(top) == summary["requests"] and {x["kind"] for x in top} == {"Server"}
        names = {x["name"].lower() for x in spans}
        assert st.root.lower() in names and (st.ask("Restaurant").lower() in names) == s["asks"]
        db = named(spans, sp.JDBC)[0]["attrs"]
        assert ("db.query.text" in db and "server.address" in db) == (s["semconv"] == "new")
        assert ("db.statement" in db and "net.peer.name" in db) == (s["semconv"] == "old")
        assert any(x["events"] for x in top) == s["gc_events"]
        assert all(("http.request.header.x_amzn_trace_id" in x["attrs"]) == s["alb"] for x in top)
        api = {x["instance"] for x in spans if x["service"] == sp.API}
        assert {st.label(sp.API, k) for k in range(s["nodes"])} <= api
        if s["ident"] == "hostport":
            assert all(x.endswith(":25520") for x in api)
        for scenario in scala_akka.SCENARIOS:
            for cause in scala_akka.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                assert cause.service == sp.API and cause.stage in (
                    None, "feature_hydration", "downstream", "model_forward")
                if not any(x in scenario for x in ("deploy", "rebalance")):
                    assert set(cause.instances) <= api, (scenario, cause)
    joined = labels(1, "joined")
    assert joined <= {x["instance"] for x in loaded[1][0]}  # the rebalance's new pod
    with pytest.raises(ValueError, match="unknown scala-akka scenario"):
        scala_akka.truth("healthy", 0)
    once, again = scala_akka.generate("g1-old-gen", 60, 0), scala_akka.generate("g1-old-gen", 60, 0)
    assert once.rows == again.rows and once.span_ids == again.span_ids  # a seed gives the same bytes


def test_a_deploy_brings_new_pods_and_the_truth_names_them() -> None:
    for seed in (0, 1, 2):
        spans = table("deploy-cold-jit", 300, seed)
        (cause,) = scala_akka.truth("deploy-cold-jit", seed)
        seen = {x["instance"] for x in roots(spans)}
        assert set(cause.instances) <= seen and set(cause.instances) == labels(seed, "deployed", 1)


@PHYSICS
def test_a_hot_restaurants_asks_wait_in_its_mailbox_and_no_other_entitys_do() -> None:
    spans = table("hot-restaurant-lunch", N, 0)
    lunch = (0.35 * run_ns(N, 0), 0.7 * run_ns(N, 0))  # its queue builds from 30 %
    asks = [x for x in named(spans, sp.Style.ask("Restaurant")) if lunch[0] < x["start"] < lunch[1]]
    by = kids(spans)
    plain = [x for x in asks if x["i"] not in by]  # no journal recovery under it
    hot = [x["duration"] for x in plain if x["attrs"]["akka.entity.id"] == f"r-{HOT}"]
    other = [x["duration"] for x in plain if x["attrs"]["akka.entity.id"] != f"r-{HOT}"]
    assert len(hot) > 60 and p(hot, 50) > 20 * MS and p(other, 95) < 5 * MS
    couriers = [x["duration"] for x in named(spans, sp.Style.ask("Courier")) if x["i"] not in by]
    assert p(couriers, 95) < 5 * MS
    steady = [x for x in named(table("steady", N, 0), sp.Style.ask("Restaurant"))
              if x["attrs"]["akka.entity.id"] == f"r-{HOT}"]
    assert len(steady) < 10


def _continuation_gaps(spans) -> dict[str, list[float]]:
    """Per pod: the callbacks' waits for a dispatcher thread that a request's spans show: from the last
    reply (geo search, traffic) to the model's start, and from the Kafka ack to the response."""
    by = kids(spans)
    out: dict[str, list[float]] = {}
    for root in roots(spans):
        children = by[root["i"]]
        ready = max(x["end"] for x in children  # the geo searches and the traffic call
                    if x["kind"] == "Client" and x["name"] not in (sp.JDBC, sp.SNAPSHOT, sp.JOURNAL))
        predict = next(x for x in children if x["name"] == sp.PREDICT)
        ack = next(x for x in children if x["kind"] == "Producer")
        out.setdefault(root["instance"], []).append(predict["start"] - ready + root["end"] - ack["end"])
    return out


@PHYSICS
def test_a_blocking_query_on_the_default_dispatcher_starves_one_pods_callbacks() -> None:
    spans = table("jdbc-on-dispatcher", N, 0)
    (canary,) = labels(0, "jdbc")
    gaps = _continuation_gaps(spans)
    assert p(gaps[canary], 90) > 5 * MS
    assert all(p(v, 90) < 1.5 * MS for pod, v in gaps.items() if pod != canary)
    jdbc = {}  # the query itself is no slower on the canary
    for x in named(spans, sp.JDBC):
        jdbc.setdefault(x["instance"] == canary, []).append(x["duration"])
    assert 0.7 < p(jdbc[True], 50) / p(jdbc[False], 50) < 1.4
    steady = _continuation_gaps(table("steady", N, 0))
    assert p(steady[canary], 90) < 1.5 * MS


@PHYSICS
def test_a_joining_pod_takes_shards_and_replays_their_entities_journals() -> None:
    spans = table("shard-rebalance", N, 0)
    (joined,) = labels(0, "joined")
    journal = named(spans, sp.JOURNAL)
    mine = [x for x in journal if x["instance"] == joined]
    assert len(mine) > 40 and min(x["start"] for x in mine) > 0.3 * run_ns(N, 0)
    steady = named(table("steady", N, 0), sp.JOURNAL)
    assert len(journal) > 2 * len(steady)
    rows = [int(x["attrs"]["db.response.returned_rows"]) for x in mine]
    assert max(rows) == 100 and min(rows) < 100  # pages of 100 events, the last one shorter


@PHYSICS
def test_the_traffic_service_slows_then_the_breaker_opens_and_requests_fall_back() -> None:
    spans = table("traffic-breaker", N, 0)
    st, run = scala_akka.style(0), run_ns(N, 0)
    calls = named(spans, st.traffic_client)
    early = [x["duration"] for x in calls if x["start"] < 0.22 * run]
    assert p(early, 99) < 40 * MS
    failed = [x for x in calls if x["status"] == "Error"]
    assert len(failed) >= 5 and all(abs(x["duration"] - 250 * MS) < 1 * MS for x in failed)
    late = [r for r in roots(spans) if r["start"] > 0.75 * run]
    with_call = {x["parent"] for x in calls}
    fallback = [r for r in late if r["i"] not in with_call]
    assert len(fallback) > 0.8 * len(late)
    assert all(r["attrs"]["eta.traffic.source"] == "fallback" for r in fallback)
    assert p([r["duration"] for r in fallback], 50) < 45 * MS  # fast: the in-process table


@PHYSICS
def test_a_sparse_area_grows_the_radius_and_the_model_scores_hundreds_of_couriers() -> None:
    def shape(scenario):
        spans = table(scenario, N, 0)
        by = kids(spans)
        grown = np.mean([sum(x["name"] == sp.GEO for x in by[r["i"]]) >= 3 for r in roots(spans)])
        pred = named(spans, sp.PREDICT)
        counts = np.array([x["attrs"]["eta.candidates.count"] for x in pred])
        slope = np.polyfit(counts, [x["duration"] / MS for x in pred], 1)[0]
        return grown, np.percentile(counts, 80), slope

    sparse, steady = shape("sparse-geo-radius"), shape("steady")
    assert sparse[0] > 0.3 and steady[0] < 0.06 and sparse[1] > 150 > steady[1]
    assert sparse[2] > 0.04 and steady[2] > 0.04  # ms per courier: the same model in both runs


def _bunched(spans) -> dict[str, float]:
    """Per pod: the share of its server spans that start within 0.5 ms of the one before."""
    starts: dict[str, list[float]] = {}
    for r in roots(spans):
        starts.setdefault(r["instance"], []).append(r["start"])
    return {pod: float(np.mean(np.diff(sorted(v)) < 0.5 * MS)) for pod, v in starts.items()}


@PHYSICS
def test_old_gen_pressure_pauses_one_pod_with_mixed_and_full_collections() -> None:
    spans = table("g1-old-gen", N, 2)
    (pod,) = labels(2, "gc")
    # requests that reach the pod during a pause start together when it ends (their server spans begin
    # on a dispatcher thread); its entities' asks, from every pod, wait too
    bunched, steady = _bunched(spans), _bunched(table("steady", N, 2))
    assert bunched[pod] > 0.09 and bunched[pod] > 2 * max(v for k, v in bunched.items() if k != pod)
    assert steady[pod] < 0.06
    events = [e for r in roots(table("g1-old-gen", 600, 0)) for e in r["events"]
              if e[2]["jvm.gc.type"] in ("Mixed", "Full")]
    assert len(events) >= 3 and all(e[2]["jvm.gc.duration_ms"] > 10 for e in events)


def _late_share(spans, pods: set[str], inside: bool) -> float:
    """The share of the steps that follow a dispatcher task (a geo search, the model, the Kafka send)
    starting in the last 30 ms of a 100 ms CFS period: where a pod's quota runs out before the period
    ends, nothing of it runs there, and what was ready runs when the next period begins."""
    starts = [x["start"] % (100 * MS) for x in spans if (x["instance"] in pods) == inside
              and x["service"] == sp.API and (x["name"] in (sp.GEO, sp.PREDICT) or x["kind"] == "Producer")]
    return float(np.mean(np.asarray(starts) > 70 * MS))


@PHYSICS
def test_throttled_pods_run_nothing_in_the_end_of_their_cfs_periods() -> None:
    spans = table("cfs-throttling", N, 2)
    pods = labels(2, "throttled")
    inside, outside = _late_share(spans, pods, True), _late_share(spans, pods, False)
    assert inside < 0.18 and inside < 0.7 * outside  # (the others wait on its entities' replies too)
    assert _late_share(table("steady", N, 2), pods, True) > 0.25


@PHYSICS
def test_new_pods_of_a_deploy_run_slow_until_their_jit_warms() -> None:
    spans = table("deploy-cold-jit", N, 2)
    new = labels(2, "deployed", 1)
    gaps = _continuation_gaps(spans)  # the callbacks' CPU: Scala code, interpreted at first
    warm = max(np.median(v) for pod, v in gaps.items() if pod not in new)
    for pod in new:
        mine = sorted((r for r in roots(spans) if r["instance"] == pod), key=lambda r: r["start"])
        assert len(mine) > 25 and mine[0]["start"] > 0.3 * run_ns(N, 2)
        assert np.median(gaps[pod][:10]) > max(3 * MS, 5 * warm)
    oldest = max(new, key=lambda pod: len(gaps[pod]))  # warming with the requests it served
    assert np.median(gaps[oldest][:10]) > 3 * np.median(gaps[oldest][-15:])
    # the model is native code: XGBoost4J is not JIT-compiled, so it is no slower on the new pods
    pred = named(spans, sp.PREDICT)
    ratio = p([x["duration"] for x in pred if x["instance"] in new], 50) / p(
        [x["duration"] for x in pred if x["instance"] not in new], 50)
    assert 0.6 < ratio < 1.6


@PHYSICS
def test_a_leader_move_holds_the_sends_to_its_partitions_only() -> None:
    spans = table("kafka-leader-move", N, 2)
    st, run = scala_akka.style(2), run_ns(N, 2)
    sends = named(spans, st.producer)
    moved = [x["duration"] for x in sends if int(x["attrs"]["messaging.destination.partition.id"]) % 3 == 2
             and 0.42 * run < x["start"] < 0.55 * run]
    others = [x["duration"] for x in sends if int(x["attrs"]["messaging.destination.partition.id"]) % 3 != 2]
    assert len(moved) > 20 and min(moved) > 50 * MS and p(others, 99) < 20 * MS
    assert {int(x["attrs"]["messaging.destination.partition.id"]) for x in sends} == set(range(PARTITIONS))


def _slow_plain_asks(spans, pods: set[str], inside: bool) -> float:
    by = kids(spans)
    asks = [x for x in spans if x["name"].startswith("ask ") and x["i"] not in by
            and (x["instance"] in pods) == inside]
    return float(np.mean([12 * MS < x["duration"] < 200 * MS for x in asks]))


@PHYSICS
def test_a_lossy_link_slows_the_asks_between_its_two_pods() -> None:
    spans = table("artery-noisy-link", N, 2)
    pods = labels(2, "link")
    assert _slow_plain_asks(spans, pods, True) > 0.025 > 0.008 > _slow_plain_asks(spans, pods, False)
    assert _slow_plain_asks(table("steady", N, 2), pods, True) < 0.008


@PHYSICS
@pytest.mark.parametrize(("seed", "scenarios"), [(0, scala_akka.SINGLES[:5]), (2, scala_akka.SINGLES[5:])])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    def p99(scenario):
        return p([r["duration"] for r in roots(table(scenario, N, seed))], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "hot-restaurant-lunch":
        hot = [x["duration"] for x in named(spans, sp.Style.ask("Restaurant"))
               if x["attrs"]["akka.entity.id"] == f"r-{HOT}"]
        return len(hot) > 50 and p(hot, 50) > 10 * MS
    if part == "traffic-breaker":
        late = [r for r in roots(spans) if r["start"] > 0.75 * run_ns(N, seed)]
        return np.mean([r["attrs"]["eta.traffic.source"] == "fallback" for r in late]) > 0.5
    if part == "deploy-cold-jit":
        return bool(labels(seed, "deployed", 1) & {r["instance"] for r in roots(spans)})
    if part == "cfs-throttling":
        return _late_share(spans, labels(seed, "throttled"), True) < 0.18
    if part == "artery-noisy-link":
        return _slow_plain_asks(spans, labels(seed, "link"), True) > 0.02
    assert part == "g1-old-gen"
    return sum(e[2]["jvm.gc.type"] in ("Mixed", "Full") for r in roots(spans) for e in r["events"]) >= 3


@PHYSICS
@pytest.mark.parametrize("pair", scala_akka.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    patterns = [c.pattern for c in scala_akka.truth(pair, 0)]
    assert patterns == [scala_akka.truth(x, 0)[0].pattern for x in parts]
    both, steady = table(pair, N, 0), table("steady", N, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
