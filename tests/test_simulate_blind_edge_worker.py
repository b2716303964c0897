"""The blind family `edge-worker` (reference_pipeline/simulate/edge_worker.py; held out): each seed's
format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way a script compile on new
isolates, an expiry wave in the PoPs' KV caches, a session object across an ocean, a serialized object,
CPU-limit kills, a region failover, connection resets, a slow ranker host, an event loop held by
JSON.parse or a backed-up central store would produce it (a steady run of the same seed does not).
Three runs go through the loader; the other mechanisms are read from the generated table."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, edge_worker
from reference_pipeline.simulate import edge_worker_spans as sp
from reference_pipeline.simulate.edge_worker_flow import BUNDLES
from reference_pipeline.simulate.edge_worker_net import POPS
from tests.blind_support import kids, load_run, named, p, span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_edge_worker.py::"
    "test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)
FAMILY = "edge-worker"
MS = 1e6


def label(resource: dict) -> str:
    """The instance the store names: service.instance.id, host.name, or Zipkin's ip:port ('' for the
    browser, which has none)."""
    if "service.instance.id" in resource:
        return resource["service.instance.id"]
    if "host.name" in resource:
        return resource["host.name"]
    if "net.host.ip" in resource:
        return f"{resource['net.host.ip']}:{resource['net.host.port']}"
    return ""


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    table = edge_worker.generate(scenario, requests, seed)
    return span_dicts(table, edge_worker.setup(seed)["fmt"] == "zipkin", label)


def run_ns(requests: int, seed: int) -> float:
    return requests / edge_worker.setup(seed)["rps"] * 1e9


def at_pop(spans, code: str, seed: int) -> list[dict]:
    """The worker's spans at one PoP."""
    inst = edge_worker.style(seed).label(sp.WORKER, edge_worker.pop_index(code))
    return [s for s in spans if s["service"] == sp.WORKER and s["instance"] == inst]


def pages(spans, seed: int) -> list[dict]:
    return named(spans, edge_worker.style(seed).root(), "Server")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("edge-worker")
    runs = {0: ("deploy-cold-isolates", 300), 1: ("deploy-cold-isolates+kv-ttl-wave", 250),
            2: ("noisy-isolate-json", 250)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == edge_worker.SCENARIOS  # open now
    assert edge_worker.SCENARIOS[0] == "steady" and len(edge_worker.SINGLES) == 10
    assert sum("+" in sc for sc in edge_worker.SCENARIOS) == 3
    for seed, (spans, summary) in loaded.items():
        s, st = edge_worker.setup(seed), edge_worker.style(seed)
        assert summary["format"] == s["fmt"]
        services = {x["service"] for x in spans}
        expected = {sp.WORKER} | ({sp.WEB} if s["rum"] else set()) | ({sp.RANKER} if s["ranker"] else set())
        assert services == expected
        roots = [x for x in spans if not x["parent"]]
        page = [x for x in spans if x["service"] == sp.WORKER and x["kind"] == "Server"]
        if s["rum"]:  # the browser's route change > fetch > the worker; a partner's sync is server-rooted
            assert {x["service"] for x in roots} == {sp.WEB} | ({sp.WORKER} if seed == 2 else set())
            batch = st.root(batch=True).lower()
            assert all(x["name"].lower() == batch for x in roots if x["service"] == sp.WORKER)
            assert all(x["parent"] for x in page if x["name"].lower() == st.root().lower())
        else:
            assert {x["service"] for x in roots} == {sp.WORKER}
        names = {x["name"].lower() for x in spans}
        assert (sp.PARSE in names) == s["internals"]
        kv = [x for x in spans if x["name"].lower() == st.kv("CANDIDATES").lower()]
        assert kv and all(("db.system" in x["attrs"]) == s["kv_db"] for x in kv)
        rank = [x for x in spans if x["name"].lower() == st.rank_client.lower()]
        assert rank and all(("url.full" in x["attrs"]) == (s["semconv"] == "new") for x in rank)
        assert all(("http.url" in x["attrs"]) == (s["semconv"] == "old") for x in rank)
        worker = [x for x in spans if x["service"] == sp.WORKER]
        edge = {st.label(sp.WORKER, j) for j in range(len(POPS))}
        mine = {x["instance"] for x in worker}
        assert mine <= edge and len(mine) >= 8
        if s["ident"] == "region":
            assert all(x["resource"]["cloud.region"] in {p.code for p in POPS} for x in worker)
        elif s["ident"] == "name":
            assert all(x["instance"].startswith(f"{sp.WORKER}@") for x in worker)
        else:
            assert all(x["attrs"]["colo"].lower() in {p.code for p in POPS} for x in page)
        started = [e for x in page for e in x["events"] if e["Name"] == "isolate.start"]
        assert bool(started) == s["events"]
        ranker = {x["instance"] for x in spans if x["service"] == sp.RANKER}
        for scenario in edge_worker.SCENARIOS:
            for cause in edge_worker.truth(scenario, seed):
                batch = cause.span == st.root(batch=True)  # the partner's route: only in its scenario
                assert batch or cause.span.lower() in names, (scenario, cause)
                if cause.service == sp.RANKER:
                    assert s["ranker"] and set(cause.instances) <= ranker, (scenario, cause)
                else:
                    assert cause.service == sp.WORKER and set(cause.instances) <= edge, (scenario, cause)
                assert cause.stage in ("ingress", "parsing", "feature_hydration", "preprocessing",
                                       "downstream")
    with pytest.raises(ValueError, match="unknown edge-worker scenario"):
        edge_worker.truth("healthy", 0)


def _first_child_gap(spans) -> dict[int, float]:
    """Each worker SERVER span's index -> the time from its start to its first child's start."""
    children = kids(spans)
    return {x["i"]: min(c["start"] for c in children[x["i"]]) - x["start"]
            for x in spans if x["service"] == sp.WORKER and x["kind"] == "Server" and x["i"] in children}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_deploy_replaces_every_isolate_and_each_new_one_compiles_before_its_first_request() -> None:
    spans = spans_of("deploy-cold-isolates", 1500, 0)
    gap = _first_child_gap(spans)
    new, old = [], []
    for x in pages(spans, 0):
        for e in x["events"]:
            if e[1] == "isolate.start":
                (new if e[2]["script.version"] == BUNDLES[1] else old).append((x, e[2]))
    assert len({x["instance"] for x, _ in new}) == len(POPS) and len(new) > 3 * len(POPS)  # churn
    assert np.median([a["isolate.compile_ms"] for _, a in new]) > 25
    assert all(gap[x["i"]] >= 0.95 * a["isolate.compile_ms"] * MS for x, a in new)
    deploy = 0.3 * run_ns(1500, 0)
    assert all(x["start"] >= deploy for x, _ in new)
    steady = [e for x in pages(spans_of("steady", 1500, 0), 0) for e in x["events"]]
    assert len(steady) < 10


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_candidate_sets_written_together_expire_together_in_every_pop() -> None:
    seed = 1  # KV spans without db attributes, but with the cache status
    run = run_ns(1500, seed)
    st = edge_worker.style(seed)

    def wave(scenario):
        kv = named(spans_of(scenario, 1500, seed), st.kv("CANDIDATES"))
        return [x for x in kv if x["attrs"]["kv.cache_status"] == "MISS" and 0.4 <= x["start"] / run < 0.5]

    misses = wave("kv-ttl-wave")
    assert len({x["instance"] for x in misses}) >= 10 and len(misses) > 60
    assert p([x["duration"] for x in misses], 50) > 60 * MS  # a long-haul read each
    assert len(wave("steady")) < len(misses) / 4


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_session_objects_on_another_continent_cost_an_ocean_round_trip_per_call() -> None:
    seed = 0
    code = edge_worker.FAR_POP[seed]
    st = edge_worker.style(seed)
    far = [x["duration"] for x in named(at_pop(spans_of("far-session-objects", 1500, seed), code, seed),
                                        st.session)]
    near = [x["duration"] for x in named(at_pop(spans_of("steady", 1500, seed), code, seed), st.session)]
    assert len(far) > 40 and p(far, 50) > POPS[edge_worker.pop_index(code)].rtt_us * MS > 5 * p(near, 50)
    assert p(near, 90) < 30 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_crawlers_bursts_queue_in_its_one_session_object() -> None:
    seed = 1  # server-rooted: the crawler's requests are traces of their own
    st = edge_worker.style(seed)
    code = edge_worker.BOT_POP[seed]
    hot = spans_of("bot-hot-object", 1500, seed)
    calls = named(at_pop(hot, code, seed), st.session)
    assert max(x["trace"] for x in hot) + 1 > 1500 + 100  # the crawler's traces beside the pages
    base = named(at_pop(spans_of("steady", 1500, seed), code, seed), st.session)
    assert p([x["duration"] for x in calls], 95) > 100 * MS > 5 * p([x["duration"] for x in base], 95)
    # one object: the crawler's calls do not overlap at the object, so a burst's last waits for the rest
    long = sorted((x for x in calls if x["duration"] > 50 * MS), key=lambda x: x["start"])
    assert len(long) > 50


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_invocations_past_the_cpu_limit_are_killed_and_the_page_retries_lite() -> None:
    seed = 0
    spans = spans_of("cpu-limit-kills", 1500, seed)
    children = kids(spans)
    by_i = {x["i"]: x for x in spans}
    killed = [x for x in pages(spans, seed) if x["status"] == "Error"]
    assert len(killed) > 50
    for x in killed:
        assert x["attrs"]["http.response.status_code"] == 503
        prep = [c for c in children[x["i"]] if c["name"] == sp.PREPARE]
        assert prep and prep[0]["attrs"]["app.candidates.count"] >= 600 and prep[0]["status"] == "Error"
        fetch = by_i[x["parent"]]
        nav = children[fetch["parent"]]
        assert len(nav) == 2 and "lite=1" in max(nav, key=lambda f: f["start"])["attrs"]["url.full"]
        retry = max(nav, key=lambda f: f["start"])
        assert retry["start"] - fetch["end"] > 60 * MS  # the wrapper's back-off
    assert not [x for x in pages(spans_of("steady", 1500, seed), seed) if x["status"] == "Error"]
    # where traces are server-rooted the retry is its own trace, with lite=1 candidates
    rooted = spans_of("cpu-limit-kills", 1000, 1)
    assert len([x for x in pages(rooted, 1) if x["status"] == "Error"]) > 30
    assert max(x["trace"] for x in rooted) + 1 > 1030


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_region_failover_sends_its_pops_ranker_calls_across_the_ocean() -> None:
    seed = 0
    st = edge_worker.style(seed)
    spans = spans_of("ranker-region-failover", 1500, seed)
    run = run_ns(1500, seed)
    children = kids(spans)
    calls = named(at_pop(spans, "iad", seed), st.rank_client)
    before = [x["duration"] for x in calls if x["start"] < 0.24 * run]
    during = [x for x in calls if 0.3 * run < x["start"] < 0.78 * run]
    assert p([x["duration"] for x in during], 50) > p(before, 50) + 60 * MS
    regions = {c["resource"]["cloud.region"] for x in during for c in children.get(x["i"], [])}
    assert regions == {"europe-west4"}
    lhr = named(at_pop(spans, "lhr", seed), st.rank_client)  # served by the healthy region all along
    assert p([x["duration"] for x in lhr], 90) < 60 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_connection_resets_make_calls_wait_for_a_new_tls_handshake() -> None:
    seed = 0
    st = edge_worker.style(seed)
    rtt = POPS[edge_worker.pop_index("sjc")].rtt_us * MS

    def handshakes(scenario):
        spans = spans_of(scenario, 1500, seed)
        children = kids(spans)
        gaps = [min(c["start"] for c in children[x["i"]]) - x["start"]
                for x in named(at_pop(spans, "sjc", seed), st.rank_client) if x["i"] in children]
        return np.mean(np.asarray(gaps) > 1.8 * rtt), len(gaps)

    storm, n = handshakes("h2-reset-storm")
    calm, _ = handshakes("steady")
    assert n > 50 and storm > 0.15 and calm < 0.03


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_slow_model_version_runs_on_one_host_and_its_calls_queue_there() -> None:
    seed = 0
    spans = spans_of("ranker-slow-host", 1500, seed)
    (cause,) = edge_worker.truth("ranker-slow-host", seed)
    per: dict[bool, list[float]] = {True: [], False: []}
    for x in named(spans, sp.ONNX):
        per[x["instance"] in cause.instances].append(x["duration"] / x["attrs"]["onnx.batch"])
    assert p(per[True], 50) > 10 * p(per[False], 50)
    server = named(spans, st_server := edge_worker.style(seed).rank_server, "Server")
    slow = [x["duration"] for x in server if x["instance"] in cause.instances]
    rest = [x["duration"] for x in server if x["instance"] not in cause.instances]
    assert st_server and p(slow, 90) > 5 * p(rest, 90)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_huge_json_bodies_hold_the_pops_only_isolate_and_its_other_requests_wait() -> None:
    parsed = kids(spans_of("noisy-isolate-json", 1500, 0))  # seed 0: `parse request` spans exported
    batch = [x for x in named(spans_of("noisy-isolate-json", 1500, 0), edge_worker.style(0).root(batch=True))
             if x["status"] != "Error"]  # past 50 ms of CPU a parse is killed
    parse = [next(c for c in parsed[x["i"]] if c["name"] == sp.PARSE) for x in batch]
    size = np.array([x["attrs"]["http.request.body.size"] for x in parse]) / 1e6
    assert len(batch) > 100 and min(size) >= 4
    assert 3.0 < np.polyfit(size, [x["duration"] / MS for x in parse], 1)[0] < 4.6  # 250 MB/s: JSON.parse
    seed = 2  # no internal spans: the parse shows in the batch route's SERVER span
    st = edge_worker.style(seed)
    code = edge_worker.NOISY_POP[seed]
    noisy = spans_of("noisy-isolate-json", 1500, seed)
    assert len(named(noisy, st.root(batch=True), "Server")) > 100
    steady = spans_of("steady", 1500, seed)
    mine, base = pages(at_pop(noisy, code, seed), seed), pages(at_pop(steady, code, seed), seed)
    assert p([x["duration"] for x in mine], 90) > 1.5 * p([x["duration"] for x in base], 90)
    other, calm = pages(at_pop(noisy, "iad", seed), seed), pages(at_pop(steady, "iad", seed), seed)
    assert p([x["duration"] for x in other], 90) < 1.2 * p([x["duration"] for x in calm], 90)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_write_backlog_at_the_central_store_slows_every_pops_misses() -> None:
    seed = 2
    st = edge_worker.style(seed)
    run = run_ns(1500, seed)

    def misses(scenario):
        return [x["duration"] for x in named(spans_of(scenario, 1500, seed), st.kv("CANDIDATES"))
                if x["duration"] > 45 * MS and 0.4 < x["start"] / run < 0.85]

    slow, base = misses("central-kv-write-backlog"), misses("steady")
    assert len(slow) > 10 and p(slow, 50) > 3 * p(base, 50)


def _p99(scenario: str, seed: int) -> float:
    table = edge_worker.generate(scenario, 2000, seed)
    return p([r[7] - r[6] for r in table.rows if r[1] == -1], 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int) -> None:
    base = _p99("steady", seed)
    for scenario in edge_worker.SINGLES:
        if scenario == "cpu-limit-kills" and not edge_worker.setup(seed)["rum"]:
            continue  # server-rooted: a killed try and its retry are two short traces (checked above)
        assert _p99(scenario, seed) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    st = edge_worker.style(seed)
    run = run_ns(1200, seed)
    if part == "deploy-cold-isolates":
        return sum(e[2]["script.version"] == BUNDLES[1] for x in pages(spans, seed)
                   for e in x["events"]) > len(POPS)
    if part == "kv-ttl-wave":
        wave = [x for x in named(spans, st.kv("CANDIDATES")) if x["duration"] > 45 * MS
                and 0.4 <= x["start"] / run < 0.45]
        return len({x["instance"] for x in wave}) >= 10
    if part == "bot-hot-object":
        calls = named(at_pop(spans, edge_worker.BOT_POP[seed], seed), st.session)
        return p([x["duration"] for x in calls], 95) > 80 * MS
    if part == "ranker-slow-host":
        (cause,) = edge_worker.truth(part, seed)
        slow = [x["duration"] for x in named(spans, sp.ONNX) if x["instance"] in cause.instances]
        rest = [x["duration"] for x in named(spans, sp.ONNX) if x["instance"] not in cause.instances]
        return p(slow, 50) > 5 * p(rest, 50)
    if part == "far-session-objects":
        calls = named(at_pop(spans, edge_worker.FAR_POP[seed], seed), st.session)
        return p([x["duration"] for x in calls], 50) > 100 * MS
    assert part == "cpu-limit-kills"
    return sum(x["status"] == "Error" for x in pages(spans, seed)) > 20


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", edge_worker.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    singles = [edge_worker.truth(x, 0)[0].pattern for x in parts]
    assert [c.pattern for c in edge_worker.truth(pair, 0)] == singles
    both, steady = spans_of(pair, 1200, 0), spans_of("steady", 1200, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
