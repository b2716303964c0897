"""The blind family `rails-recs` (reference_pipeline/simulate/rails_recs.py; held out until its honest
score): each seed's format loads through the real loader with its conventions, the truth names spans,
services and instances the run has, and each planted mechanism shows in the timings the way Puma's
backlog, the GVL, GC, the connection pool, Memcached's LRU, Elasticsearch, the worker killer or the
resolver would produce it (a steady run of the same seed does not). Three runs go through the loader;
the other mechanisms are read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, rails_recs
from reference_pipeline.simulate.rails_recs_spans import MODEL_RPC, RENDER, ROOTS
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_rails_recs.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "rails-recs"


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def label(resource: dict) -> str:
    """The instance the store names: service.instance.id, host:pid, or Zipkin's ip:port."""
    if "service.instance.id" in resource:
        return resource["service.instance.id"]
    if "process.pid" in resource:
        return f"{resource['host.name']}:{resource['process.pid']}"
    return f"{resource['net.host.ip']}:{resource['net.host.port']}"


@cache
def table_spans(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    """The generated table's spans as dicts (times in ns from the run's start), without the loader."""
    table = rails_recs.generate(scenario, requests, seed)
    out = []
    for i, (trace, parent, name, kind, res, _scope, start, end, attrs, status, _m, events, _p) in enumerate(
        table.rows
    ):
        service, ip, port = table.endpoints[res]
        resource = table.resources[res]
        if rails_recs.setup(seed)["fmt"] == "zipkin":  # only the endpoint says where a span ran
            resource = {"service.name": service, "net.host.ip": ip, "net.host.port": port}
        out.append(
            {
                "i": i,
                "trace": trace,
                "parent": parent,
                "name": name,
                "kind": kind,
                "instance": label(resource),
                "service": resource["service.name"],
                "start": start - DEFAULT_START_NS,
                "end": end - DEFAULT_START_NS,
                "attrs": attrs,
                "status": status,
                "events": events,
            }
        )
    return tuple(out)


def recs_roots(spans, seed: int) -> list[dict]:
    root = ROOTS[rails_recs.setup(seed)["naming"]]["recs"]
    return [s for s in spans if s["name"] == root and s["kind"] == "Server"]


def kids(spans) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for s in spans:
        out.setdefault(s["parent"], []).append(s)
    return out


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("rails-recs")
    runs = {0: ("pool-exhaustion", 300), 1: ("dns-timeout", 600), 2: ("cache-evictions", 300)}
    return {
        seed: load_run(tmp, FAMILY, scenario, n, seed, lists=True) for seed, (scenario, n) in runs.items()
    }


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == rails_recs.SCENARIOS
    assert sum("+" in sc for sc in rails_recs.SCENARIOS) >= 3
    for seed, (spans, summary) in loaded.items():
        s = rails_recs.setup(seed)
        assert summary["format"] == s["fmt"]
        services = {"recs-web", "recs-model"} | ({"ingress-nginx"} if s["nginx"] else set())
        assert {x["service"] for x in spans} == services
        roots = [x for x in spans if x["service"] == "recs-web" and x["kind"] == "Server"]
        assert len(roots) == summary["requests"] and all(x["parent"] for x in roots) == s["nginx"]
        assert (
            "db.statement" in next(x for x in spans if x["name"].lower().startswith("select"))["attrs"]
        ) == (s["semconv"] == "old")
        queue = [x["attrs"].get(s["queue_attr"]) for x in roots] if s["queue_attr"] else [None]
        assert all(q is not None for q in queue) == bool(s["queue_attr"])
        gc = [e for x in roots for e in x["events"] if "gc" in str(e.get("Name", "")).lower()]
        assert bool(gc) == s["gc_events"]
        names = {x["name"].lower() for x in spans}
        web = {label(x["resource"]) for x in spans if x["service"] == "recs-web"}
        for scenario in rails_recs.SCENARIOS:
            for cause in rails_recs.truth(scenario, seed):
                assert cause.service == "recs-web" and cause.span.lower() in names, (scenario, cause)
                if "killer" not in scenario and "restarts" not in scenario:  # replacements: see below
                    assert set(cause.instances) <= web, (scenario, cause)
    with pytest.raises(ValueError, match="unknown rails-recs scenario"):
        rails_recs.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_small_pool_makes_threads_wait_for_a_connection_before_their_first_query(loaded) -> None:
    spans, _ = loaded[0]
    children = kids(spans)
    run = 300 / rails_recs.setup(0)["rps"] * 1e9  # the products query is slow from 30 % to 70 % of it
    first = min(x["start"] for x in spans)
    inside, outside = [], []
    for root in recs_roots(spans, 0):
        queries = [c["start"] for c in children[root["id"]] if c["name"].lower().startswith("select")]
        at = (root["start"] - first) / run
        (inside if 0.35 < at < 0.7 else outside if at < 0.28 or at > 0.8 else []).append(
            min(queries) - root["start"]
        )
    inside, outside = np.asarray(inside), np.asarray(outside)  # the wait is before the span: no span for it
    assert np.mean(inside > 5 * MS) > 0.1 and inside.max() > 30 * MS and np.mean(outside > 5 * MS) < 0.03
    products = [x["duration"] for x in spans if "products.id IN" in x["attrs"].get("db.statement", "")]
    assert p(products, 75) > 30 * MS  # the slow query that holds the connections
    steady = table_spans("steady", 300, 0)
    by_parent = kids(steady)
    waits = [
        min(c["start"] for c in by_parent[r["i"]] if c["name"].startswith("SELECT")) - r["start"]
        for r in recs_roots(steady, 0)
    ]
    assert p(waits, 99) < 10 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_one_pods_resolver_makes_the_model_call_wait_five_seconds_while_the_server_is_fast(loaded) -> None:
    spans, summary = loaded[1]
    children = kids(spans)
    (cause,) = summary["truth"]
    calls = [x for x in spans if x["name"] == MODEL_RPC and x["kind"] == "Client"]
    slow = [c for c in calls if c["duration"] > 4 * 1000 * MS]
    assert len(slow) >= 3 and {label(c["resource"]) for c in slow} <= set(cause["instances"])
    for c in slow:
        (server,) = children[c["id"]]
        assert 5000 * MS < c["duration"] < 5100 * MS and server["duration"] < 40 * MS
        assert server["start"] - c["start"] > 5000 * MS  # the wait is before the request left
    assert p([c["duration"] for c in calls], 50) < 40 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_evicted_fragments_are_re_rendered_and_written_back(loaded) -> None:
    spans, _ = loaded[2]
    steady = table_spans("steady", 300, 2)

    def hit_ratio(xs, attrs_of):
        reads = [attrs_of(x) for x in xs if x["name"].lower() == "cache_read_multi.active_support"]
        return sum(int(a["rails.cache.hit_count"]) for a in reads) / sum(
            int(a["rails.cache.key_count"]) for a in reads
        )

    assert hit_ratio(steady, lambda x: x["attrs"]) > 0.9 > 0.7 > hit_ratio(spans, lambda x: x["attrs"])
    renders = [x["duration"] for x in spans if x["name"].lower() == RENDER]
    assert p(renders, 50) > 3 * p([x["end"] - x["start"] for x in steady if x["name"] == RENDER], 50)
    assert len([x for x in spans if x["name"] == "set_multi"]) > 0.8 * len(renders)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_fills_the_backlog_and_the_queue_time_grows_with_it() -> None:
    spans = table_spans("puma-backlog", 900, 0)
    roots = sorted(recs_roots(spans, 0), key=lambda x: x["start"])
    queue = np.array([x["attrs"]["request.queue_time_ms"] for x in roots])
    starts = np.array([x["start"] for x in roots]) / 1e9
    run = 900 / rails_recs.setup(0)["rps"]  # the burst: 4.5x from 35 % of this for 20 % of it
    late_in_burst = (starts > 0.45 * run) & (starts < 0.55 * run)
    assert np.median(queue[late_in_burst]) > 100 and np.median(queue[starts < 0.3 * run]) < 1
    steady = [x["attrs"]["request.queue_time_ms"] for x in recs_roots(table_spans("steady", 400, 0), 0)]
    assert p(steady, 99) < 40


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_cpu_heavy_export_stretches_the_io_spans_of_its_worker_only() -> None:
    spans = table_spans("gvl-contention", 1200, 0)
    exports = [
        x for x in spans if x["kind"] == "Server" and "per_page=2000" in x["attrs"].get("http.target", "")
    ]
    assert len(exports) >= 5
    children = kids(spans)
    same, other = [], []
    for root in recs_roots(spans, 0):
        for es in (c for c in children[root["i"]] if c["name"] == "search"):
            busy = any(
                e["instance"] == root["instance"] and e["start"] < es["end"] and e["end"] > es["start"]
                for e in exports
            )
            (same if busy else other).append(es["end"] - es["start"])
    assert len(same) >= 8 and p(same, 50) > 3 * p(other, 50) and p(other, 90) < 30 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_canary_pods_leaking_workers_pause_longer_and_longer() -> None:
    spans = table_spans("gc-leak", 900, 2)
    (cause,) = rails_recs.truth("gc-leak", 2)
    majors: dict[str, list[tuple[float, float]]] = {}
    for root in (x for x in spans if x["service"] == "recs-web" and x["kind"] == "Server"):
        for at, name, attrs in root["events"]:
            if name == "ruby.gc.major":
                majors.setdefault(root["instance"], []).append((at, attrs["ruby.gc.pause_ms"]))
    leaking = sorted(set(majors[cause.instances[0]]))
    assert len(leaking) >= 4 and leaking[-1][1] > 2 * leaking[0][1] and leaking[-1][1] > 150
    assert all(ms < 100 for inst, xs in majors.items() if inst not in cause.instances for _, ms in xs)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_n_plus_one_queries_grow_with_the_items_on_the_page() -> None:
    for scenario, per_item in (("n-plus-one", True), ("steady", False)):
        spans = table_spans(scenario, 200, 1)
        children = kids(spans)
        items, db_ms = [], []
        for root in recs_roots(spans, 1):
            queries = [c for c in children[root["i"]] if c["name"].startswith("SELECT")]
            n = root["attrs"]["recs.items_count"]
            assert 3 < len(queries) <= n + 2 if per_item else len(queries) == 3
            items.append(n)
            db_ms.append(sum(c["end"] - c["start"] for c in queries) / MS)
        slope = np.polyfit(items, db_ms, 1)[0]  # DB ms per item on the page
        assert slope > 0.5 if per_item else slope < 0.1


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_replica_makes_searches_bimodal() -> None:
    slow = [x["end"] - x["start"] for x in table_spans("slow-shard", 400, 1) if x["name"] == "search"]
    fast = [x["end"] - x["start"] for x in table_spans("steady", 400, 1) if x["name"] == "search"]
    share = np.mean(np.asarray(slow) > 50 * MS)
    assert 0.3 < share < 0.6 and np.mean(np.asarray(fast) > 50 * MS) < 0.03


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("scenario", "seed"), [("worker-restarts", 0), ("gc-leak+worker-killer", 1)])
def test_killed_workers_come_back_as_new_processes_that_serve_cold(scenario: str, seed: int) -> None:
    spans = table_spans(scenario, 1500, seed)
    cold = next(c for c in rails_recs.truth(scenario, seed) if c.pattern == "cold_start")
    roots = recs_roots(spans, seed)
    first_seen = {}
    for root in sorted(roots, key=lambda x: x["start"]):
        first_seen.setdefault(root["instance"], root["start"])
    assert set(cold.instances) <= set(first_seen)
    run = 1500 / rails_recs.setup(seed)["rps"] * 1e9
    old = np.median([x["end"] - x["start"] for x in roots if x["instance"] not in cold.instances])
    for inst in cold.instances:
        assert 0.15 * run < first_seen[inst]  # born mid-run
        mine = sorted((x for x in roots if x["instance"] == inst), key=lambda x: x["start"])
        assert len(mine) >= 8 and mine[0]["end"] - mine[0]["start"] > 2.5 * old
        assert np.median([x["end"] - x["start"] for x in mine[:3]]) > 1.5 * np.median(
            [x["end"] - x["start"] for x in mine[-5:]]
        )
