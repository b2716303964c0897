"""The blind family `php-faiss` (reference_pipeline/simulate/php_faiss.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way PHP-FPM's backlog, PDO's connects, a
slow replica, Redis evictions, a cold page cache, THP freezes, a saturated worker pool, nprobe or the
candidate count would produce it (a steady run of the same seed does not). Three runs go through the
loader; the other mechanisms are read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, php_faiss
from reference_pipeline.simulate import php_faiss_spans as sp
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_php_faiss.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "php-faiss"


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def label(resource: dict) -> str:
    """The instance the store names: service.instance.id, host.name:process.pid, or Zipkin's ip:port."""
    if "service.instance.id" in resource:
        return resource["service.instance.id"]
    if "process.pid" in resource:
        return f"{resource['host.name']}:{resource['process.pid']}"
    return f"{resource['net.host.ip']}:{resource['net.host.port']}"


@cache
def table_spans(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    """The generated table's spans as dicts (times in ns from the run's start), without the loader."""
    table = php_faiss.generate(scenario, requests, seed)
    zipkin = php_faiss.setup(seed)["fmt"] == "zipkin"
    out = []
    for i, (_t, parent, name, kind, res, _s, start, end, attrs, status, _m, _e, _p) in enumerate(table.rows):
        service, ip, port = table.endpoints[res]
        resource = {"service.name": service, "net.host.ip": ip, "net.host.port": port} if zipkin else (
            table.resources[res])
        out.append({"i": i, "parent": parent, "name": name, "kind": kind, "service": service,
                    "instance": label(resource), "start": start - DEFAULT_START_NS,
                    "end": end - DEFAULT_START_NS, "duration": end - start, "attrs": attrs, "status": status})
    return tuple(out)


def kids(spans, key: str = "i") -> dict:
    out: dict = {}
    for s in spans:
        out.setdefault(s["parent"], []).append(s)
    return out


def named(spans, name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and kind in (None, s["kind"])]


def run_ns(requests: int, seed: int) -> float:
    return requests / php_faiss.setup(seed)["rps"] * 1e9


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("php-faiss")
    runs = {0: ("fpm-backlog", 800), 1: ("mysql-handshakes", 300), 2: ("retrieval-saturation", 600)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed) for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == php_faiss.SCENARIOS  # open now
    assert sum("+" in sc for sc in php_faiss.SCENARIOS) >= 3 and php_faiss.SCENARIOS[0] == "steady"
    for seed, (spans, summary) in loaded.items():
        s, style = php_faiss.setup(seed), php_faiss.style(seed)
        assert summary["format"] == s["fmt"]
        assert {x["service"] for x in spans} == {sp.NGINX, sp.WEB, sp.ANN}
        roots = [x for x in spans if x["service"] == sp.WEB and x["kind"] == "Server"]
        edge = [x for x in spans if x["service"] == sp.NGINX]
        foreign = [x for x in spans if x["service"] == sp.ANN and not x["parent"]]  # an untraced client's
        assert len(roots) == len(edge) and len(edge) + len(foreign) == summary["requests"]
        assert all(x["parent"] for x in roots) and not any(x["parent"] for x in edge)
        db = next(x for x in spans if x["name"].lower() == sp.EXECUTE.lower())["attrs"]
        assert ("db.query.text" in db and "server.address" in db) == (s["semconv"] == "new")
        assert ("db.statement" in db and "net.peer.name" in db) == (s["semconv"] == "old")
        names = {x["name"].lower() for x in spans}
        assert (sp.FAISS in names) == s["internals"]
        assert (sp.GUZZLE.lower() in names) == (s["transport"] == "http")
        web = {label(x["resource"]) for x in roots}
        ann = {label(x["resource"]) for x in spans if x["service"] == sp.ANN}
        if s["ident"] == "host-pid":  # one instance per PHP-FPM worker process
            assert len(web) >= s["web_pods"] * s["workers"]
        else:
            assert len(web) == s["web_pods"] and len(ann) == s["ann_pods"]
        assert ("service.instance.id" in roots[0]["resource"]) == (s["ident"] == "instance-id")
        for scenario in php_faiss.SCENARIOS:
            for cause in php_faiss.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                assert set(cause.instances) <= (web if cause.service == sp.WEB else ann), (scenario, cause)
                assert cause.stage in ("queue", "feature_hydration", "downstream", "postprocessing")
        assert style.root.lower() in names
    with pytest.raises(ValueError, match="unknown php-faiss scenario"):
        php_faiss.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_over_the_worker_capacity_waits_in_the_fpm_backlog_before_php_starts(loaded) -> None:
    spans, _ = loaded[0]
    by_id = {x["id"]: x for x in spans}
    run = run_ns(800, 0)  # the burst: from 35 % of the run, 6 % of it long (arrivals compress: ~30 %)
    first = min(x["start"] for x in spans)
    inside, before = [], []
    for root in (x for x in spans if x["service"] == sp.WEB and x["kind"] == "Server"):
        nginx = by_id[root["parent"]]
        at = (nginx["start"] - first) / run
        (inside if 0.34 < at < 0.5 else before if at < 0.3 else []).append(root["start"] - nginx["start"])
    assert p(inside, 75) > 25 * MS and max(inside) > 60 * MS and p(before, 99) < 2 * MS
    steady = table_spans("steady", 800, 0)
    parent = {x["i"]: x for x in steady}
    waits = [r["start"] - parent[r["parent"]]["start"] for r in named(steady, php_faiss.style(0).root)]
    assert p(waits, 99.9) < 3 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_without_persistent_connections_every_request_pays_a_tls_connect(loaded) -> None:
    spans, _ = loaded[1]
    connects = [x["duration"] for x in spans if x["name"] == sp.CONNECT]
    assert len(connects) == 300 and min(connects) > 5 * MS and p(connects, 50) > 12 * MS
    steady = [x["duration"] for x in table_spans("steady", 300, 1) if x["name"] == sp.CONNECT]
    assert p(steady, 90) < 0.2 * MS  # reused per worker: only a fresh worker's first use connects


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_thp_freezes_stretch_every_call_in_flight_on_one_retrieval_pod_only() -> None:
    spans = table_spans("thp-stalls", 1200, 0)
    (cause,) = php_faiss.truth("thp-stalls", 0)
    server = [x for x in spans if x["service"] == sp.ANN and x["kind"] == "Server"]
    stretched = [x for x in server if x["duration"] > 25 * MS]  # in flight when a freeze began
    assert len(stretched) >= 5 and {x["instance"] for x in stretched} == set(cause.instances)
    # calls that arrive during a freeze are taken by the workers together when it ends
    by_parent = kids(spans)
    held = [by_parent[c["i"]][0] for c in named(spans, sp.GRPC_SEARCH, "Client")
            if by_parent[c["i"]][0]["start"] - c["start"] > 10 * MS]
    assert len(held) >= 20 and {x["instance"] for x in held} == set(cause.instances)
    starts = np.sort([x["start"] for x in held])
    assert np.mean(np.diff(starts) < 1 * MS) > 0.4
    steady = [x["duration"] for x in named(table_spans("steady", 1200, 0), sp.GRPC_SEARCH, "Server")]
    assert p(steady, 99.5) < 12 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_one_slow_replica_makes_a_third_of_the_statements_slow() -> None:
    spans = table_spans("slow-replica", 900, 0)
    by_host: dict[str, list[float]] = {}
    for x in named(spans, sp.EXECUTE):
        by_host.setdefault(x["attrs"]["server.address"], []).append(x["duration"])
    slow = sp.REPLICAS[php_faiss.SLOW_REPLICA]
    assert set(by_host) == set(sp.REPLICAS)
    assert 0.25 < len(by_host[slow]) / sum(map(len, by_host.values())) < 0.42
    assert all(p(by_host[slow], 50) > 2 * p(v, 50) for h, v in by_host.items() if h != slow)
    assert all(p(by_host[slow], 95) > 8 * p(v, 95) for h, v in by_host.items() if h != slow)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_redis_evictions_turn_hits_into_gpu_encodes_in_bigger_batches() -> None:
    def misses(scenario):
        spans = table_spans(scenario, 1500, 0)
        run = run_ns(1500, 0)
        roots = named(spans, php_faiss.style(0).root)
        late = [r for r in roots if r["start"] > 0.4 * run]
        embeds = {x["parent"] for x in named(spans, sp.GRPC_EMBED, "Client")}
        share = np.mean([r["i"] in embeds for r in late])
        batches = [x["attrs"]["trt.batch.size"] for x in named(spans, sp.TRT)]
        return share, np.mean(batches), len(named(spans, sp.SET)) == len(embeds)

    storm, steady = misses("embedding-evictions"), misses("steady")
    assert storm[0] > 0.5 and steady[0] < 0.08 and storm[1] > steady[1] and storm[2] and steady[2]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_after_an_index_swap_searches_fault_lists_in_and_speed_up_as_they_become_resident() -> None:
    spans = table_spans("index-swap", 1500, 0)
    scans = named(spans, sp.FAISS)
    for pod in {x["instance"] for x in scans}:
        mine = sorted((x for x in scans if x["instance"] == pod), key=lambda x: x["start"])
        new = [x for x in mine if x["attrs"]["faiss.index"] == sp.INDEX_NEW]
        old = [x for x in mine if x["attrs"]["faiss.index"] == sp.INDEX_OLD]
        assert len(old) > 50 and len(new) > 100
        first, last = [x["duration"] for x in new[:15]], [x["duration"] for x in new[-40:]]
        assert np.median(first) > 2.5 * np.median([x["duration"] for x in old[-40:]])
        assert np.median(first) > 1.5 * np.median(last)
    steady = [x["duration"] for x in named(table_spans("steady", 1500, 0), sp.FAISS)]
    assert p(steady, 99) < 8 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_untraced_batch_client_saturates_the_worker_pool_and_storefront_calls_wait(loaded) -> None:
    spans, _ = loaded[2]  # Zipkin: only the SERVER spans at ann-retrieval
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    foreign = [x for x in spans if not x["parent"] and x["service"] == sp.ANN]
    assert len(foreign) > 100 and all(x["attrs"]["ann.top_k"] == "1000" for x in foreign)
    run = run_ns(600, 2)
    first = min(x["start"] for x in spans)
    inside, outside = [], []
    for call in (x for x in named(spans, sp.GRPC_SEARCH, "Client")):
        (server,) = by_parent[call["id"]]
        at = (call["start"] - first) / run
        (inside if 0.4 < at < 0.75 else outside if at < 0.25 else []).append(server["start"] - call["start"])
    assert p(inside, 90) > 10 * MS and p(outside, 99) < 1 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_raised_nprobe_makes_every_scan_slower() -> None:
    raised = named(table_spans("nprobe-raise", 600, 1), sp.FAISS)
    steady = named(table_spans("steady", 600, 1), sp.FAISS)
    assert {x["attrs"]["faiss.nprobe"] for x in raised} == {128}
    assert {x["attrs"]["faiss.nprobe"] for x in steady} == {16}
    assert p([x["duration"] for x in raised], 5) > 3 * p([x["duration"] for x in steady], 95)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_rerank_and_render_grow_with_the_candidate_count() -> None:
    for scenario, slope_at_least in (("candidate-growth", 0.03), ("steady", 0.03)):
        spans = table_spans(scenario, 500, 2)
        rerank = named(spans, sp.RERANK)
        counts = np.array([int(x["attrs"]["app.candidates.count"]) for x in rerank])
        slope = np.polyfit(counts, [x["duration"] / MS for x in rerank], 1)[0]
        assert slope > slope_at_least  # ms per candidate, in either run: the cost model is the same
        if scenario == "candidate-growth":
            assert np.median(counts) > 250
            shown = [int(x["attrs"]["app.items.rendered"]) for x in named(spans, sp.RENDER)]
            assert max(shown) == 120
        else:
            assert np.median(counts) < 80


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_recycled_workers_come_back_as_new_processes_with_a_slow_first_request() -> None:
    spans = table_spans("steady", 2000, 1)  # host.name + process.pid: a worker is an instance
    roots = sorted(named(spans, php_faiss.style(1).root), key=lambda x: x["start"])
    initial = set(php_faiss.truth("slow-replica", 1)[0].instances)
    born = {}
    for r in roots:
        born.setdefault(r["instance"], r)
    fresh = [r for inst, r in born.items() if inst not in initial]
    assert 2 <= len(fresh) <= 20 and initial <= set(born)
    assert np.median([r["duration"] for r in fresh]) > np.median([r["duration"] for r in roots]) + 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"), [(0, php_faiss.SINGLES[:5]), (2, php_faiss.SINGLES[5:])])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    style = php_faiss.style(seed)

    def p99(scenario):
        return p([x["duration"] for x in named(table_spans(scenario, 1000, seed), style.nginx)], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.25 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    style = php_faiss.style(seed)
    parent = {x["i"]: x for x in spans}
    roots = named(spans, style.root)
    if part == "slow-replica":
        by_host: dict[str, list[float]] = {}
        for x in named(spans, sp.EXECUTE):
            by_host.setdefault(x["attrs"]["server.address"], []).append(x["duration"])
        slow = by_host.pop(sp.REPLICAS[php_faiss.SLOW_REPLICA])
        return all(p(slow, 50) > 2 * p(v, 50) for v in by_host.values())
    if part == "thp-stalls":
        stretched = [x for x in named(spans, style.server("search"), "Server") if x["duration"] > 25 * MS]
        thp = php_faiss.truth("thp-stalls", seed)[0].instances
        return len(stretched) >= 3 and {x["instance"] for x in stretched} == set(thp)
    if part == "candidate-growth":
        return np.median([int(x["attrs"]["app.candidates.count"]) for x in named(spans, sp.RERANK)]) > 250
    if part == "embedding-evictions":
        return len(named(spans, style.client("embed"), "Client")) > 0.4 * len(roots)
    if part == "fpm-backlog":
        return max(r["start"] - parent[r["parent"]]["start"] for r in roots) > 50 * MS
    assert part == "mysql-handshakes"
    return min(x["duration"] for x in named(spans, sp.CONNECT)) > 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", php_faiss.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in php_faiss.truth(pair, 0)] == [php_faiss.truth(x, 0)[0].pattern for x in parts]
    both, steady = table_spans(pair, 900, 0), table_spans("steady", 900, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
