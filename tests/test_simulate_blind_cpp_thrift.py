"""The blind family `cpp-thrift` (reference_pipeline/simulate/cpp_thrift.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way THP direct compaction, a scrape holding
the metrics mutex, a saturated worker pool, NUMA-remote memory, memcached evictions, an mcrouter
failover, a rolling restart, a slow hedged dependency, larger candidate sets or CPU steal would produce
it (a steady run of the same seed does not). Three runs go through the loader; the other mechanisms
are read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, cpp_thrift
from reference_pipeline.simulate import cpp_thrift_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

CONTRACT = (
    "tests/test_simulate_blind_cpp_thrift.py::"
    "test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)
MS = 1e6
FAMILY = "cpp-thrift"


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(cpp_thrift, scenario, requests, seed)


def run_ns(requests: int, seed: int) -> float:
    return requests / cpp_thrift.setup(seed)["rps"] * 1e9


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("cpp-thrift")
    runs = {0: ("rolling-restart", 700), 1: ("thp-compaction", 500), 2: ("worker-burst", 600)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == cpp_thrift.SCENARIOS  # open now
    assert cpp_thrift.SCENARIOS[0] == "steady" and len(cpp_thrift.PAIRS) == 3
    assert 9 <= len(cpp_thrift.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s = cpp_thrift.setup(seed)
        assert summary["format"] == s["fmt"] and summary["requests"] > 0
        assert {x["service"] for x in spans} == {sp.FEED, sp.RANKER, sp.FEATURES, sp.ADS}
        roots = [x for x in spans if not x["parent"]]
        assert {x["name"].lower() for x in roots} == {sp.ROOT.lower()} and len(roots) == summary["requests"]
        call = next(x for x in spans if x["name"].lower() == sp.BLEND.lower())["attrs"]
        assert call["rpc.system"] == "apache_thrift"
        assert ("server.address" in call) == (s["semconv"] == "new") != ("net.peer.name" in call)
        names = {x["name"].lower() for x in spans}
        assert (sp.FORWARD.lower() in names) == s["internals"] == (sp.STATS.lower() in names)
        handlers = named(spans, sp.RANK, "Server")
        counted = named(spans, s["count_on"]) if s["count_on"] else []
        assert all("app.candidates.count" in x["attrs"] for x in counted)
        assert not any("app.candidates.count" in x["attrs"] for x in spans if x not in counted)
        ranker = {x["instance"] for x in handlers}
        for scenario in cpp_thrift.SCENARIOS:
            for cause in cpp_thrift.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                assert cause.service == sp.RANKER and cause.stage in (
                    "queue", "feature_hydration", "model_forward", "postprocessing", "downstream")
                if "rolling-restart" not in scenario or seed == 0:
                    assert set(cause.instances) <= ranker, (scenario, cause)
        if s["ident"] == "endpoint":
            assert len(ranker) == s["hosts"]
        elif seed == 0:  # a restarted process is a new instance
            assert len(ranker) == s["hosts"] + len(cpp_thrift.restarted(seed))
    events = [e for x in loaded[1][0] for e in (x["events"] or "")]
    assert events and sp.STALL_EVENT in "".join(map(str, (x["events"] for x in loaded[1][0])))
    assert not any(x["events"] and x["events"] != "[]" for x in loaded[0][0] + loaded[2][0])
    restarted = set(cpp_thrift.truth("rolling-restart", 1)[0].instances)
    assert restarted <= {x["instance"] for x in spans_of("rolling-restart", 300, 1)}
    again = [cpp_thrift.generate("thp-compaction", 60, 1) for _ in range(2)]  # a seed: the same run
    assert again[0].rows == again[1].rows and again[0].span_ids == again[1].span_ids
    with pytest.raises(ValueError, match="unknown cpp-thrift scenario"):
        cpp_thrift.truth("healthy", 0)


def _forward_by_host(spans) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for x in named(spans, sp.FORWARD):
        out.setdefault(x["instance"], []).append(x)
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_compaction_stalls_the_faulting_threads_of_one_host_not_every_thread(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger, long page-fault stalls reported as span events
    (cause,) = cpp_thrift.truth("thp-compaction", 1)
    stretched = {x["instance"] for x in named(spans, sp.FORWARD) if x["duration"] > 150 * MS}
    assert stretched == set(cause.instances)
    thp = [x for x in named(spans, sp.FORWARD) if x["instance"] in cause.instances]
    assert 0.03 < np.mean([x["duration"] > 100 * MS for x in thp]) < 0.6  # not every inference stalls
    with_event = [x for x in spans if x["events"] and sp.STALL_EVENT in str(x["events"])]
    assert with_event and {x["instance"] for x in with_event} == set(cause.instances)
    steady = [x["duration"] for x in named(spans_of("steady", 500, 1), sp.FORWARD)]
    assert max(steady) < 150 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_scrape_holds_the_metrics_mutex_on_every_host_every_15_seconds() -> None:
    spans = spans_of("slow-metrics-scrape", 2000, 0)
    held = [x for x in named(spans, sp.STATS) if x["duration"] > 100 * MS]
    hosts = {x["instance"] for x in named(spans, sp.STATS)}
    assert {x["instance"] for x in held} == hosts
    for host in hosts:  # a host's blocked bumps end together (the scrape releasing the mutex)
        ends = np.sort([x["end"] for x in held if x["instance"] == host])
        gaps = np.diff(ends)
        assert np.all((gaps < 5 * MS) | (gaps > 13e9))
    steady = [x["duration"] for x in named(spans_of("steady", 2000, 0), sp.STATS)]
    assert max(steady) < 15 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_fills_the_worker_queues_before_the_handlers_start() -> None:
    spans = spans_of("worker-burst", 2000, 2)  # the handler's SERVER span starts when a worker takes it
    by_parent = kids(spans)
    waits = []
    for call in named(spans, sp.RANK_CLIENT, "Client"):
        server = [x for x in by_parent.get(call["i"], []) if x["kind"] == "Server"]
        if server:
            waits.append((call["start"], server[0]["start"] - call["start"]))
    waits.sort()
    long = [t for t, w in waits if w > 20 * MS]
    assert len(long) > 40 and max(long) - min(long) < 0.3 * waits[-1][0]  # together: the burst
    assert p([w for t, w in waits if t < min(long) - 1e9], 99) < 1 * MS
    shed = [x for x in named(spans, sp.RANK_CLIENT, "Client") if x["status"] == "Error"]
    assert all(len(by_parent.get(x["i"], [])) == 0 for x in shed)  # shed before a handler ran
    steady = named(spans_of("steady", 2000, 2), sp.RANK_CLIENT, "Client")
    assert not [c for c in steady if c["status"] == "Error"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_full_queue_sheds_before_a_handler_runs_and_the_feed_api_retries_another_host() -> None:
    spans = spans_of("candidate-growth+worker-burst", 2000, 2)  # the burst on a busier fleet
    by_parent = kids(spans)
    shed = 0
    for root in named(spans, sp.ROOT):
        calls = sorted((x for x in by_parent[root["i"]] if x["name"] == sp.RANK_CLIENT),
                       key=lambda x: x["start"])
        if calls[0]["status"] != "Error":
            assert len(calls) == 1
            continue
        shed += 1
        assert not by_parent.get(calls[0]["i"]) and calls[0]["duration"] < 2 * MS  # no handler ran
        assert len(calls) == 2 and calls[1]["attrs"]["net.peer.name"] != calls[0]["attrs"]["net.peer.name"]
    assert shed > 50


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_numa_remote_host_computes_slower_per_candidate() -> None:
    spans = spans_of("numa-remote", 1000, 0)  # the candidate count is on the forward span
    (cause,) = cpp_thrift.truth("numa-remote", 0)
    rate = {h: np.median([x["duration"] / x["attrs"]["app.candidates.count"] for x in v])
            for h, v in _forward_by_host(spans).items()}
    slow = rate.pop(cause.instances[0])
    assert all(slow > 1.3 * r for r in rate.values())
    steady = _forward_by_host(spans_of("steady", 1000, 0))
    rates = [np.median([x["duration"] / x["attrs"]["app.candidates.count"] for x in v])
             for v in steady.values()]
    assert max(rates) < 1.15 * min(rates)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_evictions_turn_memcached_hits_into_feature_service_calls() -> None:
    def share(scenario):
        spans = spans_of(scenario, 1000, 0)
        late = [x for x in named(spans, sp.RANK, "Server") if x["start"] > 0.35 * run_ns(1000, 0)]
        calls = {x["parent"] for x in named(spans, sp.GET_FEATURES, "Client")}
        return np.mean([x["i"] in calls for x in late])

    assert share("memcached-evictions") > 0.5 and share("steady") < 0.1


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_mcrouter_failover_adds_a_cross_region_round_trip_to_multigets() -> None:
    run = run_ns(1000, 1)
    multigets = named(spans_of("mcrouter-failover", 1000, 1), sp.MULTIGET)
    before = [x["duration"] for x in multigets if x["start"] < 0.2 * run]
    after = [x["duration"] for x in multigets if x["start"] > 0.3 * run]
    assert p(before, 99) < 10 * MS and 0.25 < np.mean(np.array(after) > 30 * MS) < 0.7
    assert 30 * MS < p([d for d in after if d > 25 * MS], 50) < 70 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_restarted_processes_miss_the_embedding_lru_and_run_cold_graphs(loaded) -> None:
    spans, _ = loaded[0]
    restarted = set(cpp_thrift.truth("rolling-restart", 0)[0].instances)
    lookups = named(spans, sp.LOOKUP)
    new = [x["attrs"]["cache.hit"] in (True, "true") for x in lookups if x["instance"] in restarted]
    old = [x["attrs"]["cache.hit"] in (True, "true") for x in lookups if x["instance"] not in restarted]
    assert len(new) > 50 and np.mean(new) < 0.5 < 0.85 < np.mean(old)
    fwd_new = [x["duration"] for x in named(spans, sp.FORWARD) if x["instance"] in restarted]
    fwd_old = [x["duration"] for x in named(spans, sp.FORWARD) if x["instance"] not in restarted]
    assert p(fwd_new, 95) > 100 * MS > p(fwd_old, 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_ads_service_fires_hedges_at_40_ms_and_timeouts_at_80_ms() -> None:
    spans = spans_of("slow-ads-blender", 1000, 1)
    by_parent = kids(spans)
    hedged = timeouts = cancelled = 0
    for h in named(spans, sp.RANK, "Server"):
        blends = sorted((x for x in by_parent[h["i"]] if x["name"] == sp.BLEND), key=lambda x: x["start"])
        if len(blends) == 2:
            hedged += 1
            assert abs(blends[1]["start"] - blends[0]["start"] - 40 * MS) < 0.01 * MS
            for b in blends:
                if b["status"] == "Error" and abs(b["duration"] - 80 * MS) < 0.01 * MS:
                    timeouts += 1
            ok = [b for b in blends if b["status"] != "Error"]
            cancelled += sum(bool(ok) and b["status"] == "Error" and b["end"] == ok[0]["end"] for b in blends)
    assert hedged > 300 and timeouts > 30 and cancelled > 100
    calm = spans_of("steady", 1000, 1)
    calm_kids = kids(calm)
    steady = sum(len([x for x in calm_kids[h["i"]] if x["name"] == sp.BLEND]) == 2
                 for h in named(calm, sp.RANK, "Server"))
    assert steady < 30


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_forward_grows_with_the_candidate_count() -> None:
    for scenario in ("candidate-growth", "steady"):
        fwd = named(spans_of(scenario, 1000, 0), sp.FORWARD)
        counts = np.array([x["attrs"]["app.candidates.count"] for x in fwd])
        slope = np.polyfit(counts, [x["duration"] / MS for x in fwd], 1)[0]
        assert slope > 0.025  # ms per candidate, the same cost model in either run
        assert (np.median(counts) > 1200) == (scenario == "candidate-growth")


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_cpu_steal_slows_everything_on_one_host_all_the_time() -> None:
    spans = spans_of("cpu-steal", 1000, 1)
    (cause,) = cpp_thrift.truth("cpu-steal", 1)
    run = run_ns(1000, 1)
    rerank = named(spans, sp.RERANK)
    for fifth in range(5):  # continuously: in every fifth of the run, no pauses
        part = [x for x in rerank if fifth / 5 <= x["start"] / run < (fifth + 1) / 5]
        mine = [x["duration"] for x in part if x["instance"] in cause.instances]
        rest = [x["duration"] for x in part if x["instance"] not in cause.instances]
        assert 1.5 < np.median(mine) / np.median(rest) < 2.2 and p(mine, 99) < 3 * np.median(mine)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"), [(0, cpp_thrift.SINGLES[:5]), (1, cpp_thrift.SINGLES[5:]),
                                                 (2, cpp_thrift.SINGLES[::3])])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    def p99(scenario):
        return p([x["duration"] for x in named(spans_of(scenario, 1000, seed), sp.ROOT)], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "thp-compaction":
        (cause,) = cpp_thrift.truth(part, seed)
        slow = {x["instance"] for x in named(spans, sp.FORWARD) if x["duration"] > 150 * MS}
        return slow == set(cause.instances)
    if part == "slow-metrics-scrape":
        return max(x["duration"] for x in named(spans, sp.STATS)) > 150 * MS
    if part == "memcached-evictions":
        return len(named(spans, sp.GET_FEATURES, "Client")) > 0.3 * len(named(spans, sp.RANK, "Server"))
    if part == "slow-ads-blender":
        return len(named(spans, sp.BLEND)) > 1.3 * len(named(spans, sp.RANK, "Server"))
    if part == "candidate-growth":
        return np.median([x["attrs"]["app.candidates.count"] for x in named(spans, sp.FORWARD)]) > 1200
    assert part == "worker-burst"
    parent = {x["i"]: x for x in spans}
    return max(x["start"] - parent[x["parent"]]["start"] for x in named(spans, sp.RANK, "Server")) > 50 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", cpp_thrift.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    singles = [cpp_thrift.truth(x, 0)[0].pattern for x in parts]
    assert [c.pattern for c in cpp_thrift.truth(pair, 0)] == singles
    both, steady = spans_of(pair, 1000, 0), spans_of("steady", 1000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
