"""The blind family `search-bff` (reference_pipeline/simulate/search_bff.py; held out until its honest
scores): each seed's format loads through the real loader with its conventions, the truth names spans,
services and instances the run has, and each planted mechanism shows in the timings the way the event
loop, the shards, the gunicorn workers, the cache ring or the keep-alive agent would produce it (a
steady run of the same seed does not). Three runs go through the loader; the other mechanisms are read
from the generated table, to keep the file fast."""

from __future__ import annotations

import numpy as np
import pytest

from reference_pipeline.simulate import search_bff
from reference_pipeline.simulate import search_bff_spans as spans_mod
from reference_pipeline.simulate.blind import UNTOUCHED, scenarios
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_search_bff.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "search-bff"


def instance(span: dict) -> str:
    r = span["resource"]
    if "net.host.ip" in r:
        return f"{r['net.host.ip']}:{r['net.host.port']}"
    return r.get("k8s.pod.name") or f"{r['host.name']}:{r['process.pid']}"


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def named(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and (kind is None or s["kind"] == kind)]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("search-bff")
    runs = {0: "mark-compact+slow-shard", 1: "loop-block", 2: "pers-timeout"}
    return {seed: load_run(tmp, FAMILY, scenario, 400, seed, lists=True) for seed, scenario in runs.items()}


def table_spans(scenario: str, requests: int, seed: int, **opts) -> list[dict]:
    """The generated table's spans as dicts (times in ns from the run's start), without the loader."""
    table = search_bff.generate(scenario, requests, seed, **opts)
    out = []
    for i, (trace, parent, name, kind, res, _scope, start, end, attrs, status, _m, events, _p) in enumerate(
            table.rows):
        out.append({"i": i, "trace": trace, "parent": parent, "name": name, "kind": kind, "res": res,
                    "resource": table.resources[res], "start": start - DEFAULT_START_NS,
                    "end": end - DEFAULT_START_NS, "attrs": attrs, "status": status, "events": events})
    return out


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in UNTOUCHED and scenarios(FAMILY) == search_bff.SCENARIOS
    expected = {0: {"search-bff", "personalization", "ltr-reranker", "products-es"},
                1: {"search-bff", "personalization", "ltr-reranker"}, 2: {"search-bff", "personalization"}}
    for seed, (spans, summary) in loaded.items():
        s = search_bff.setup(seed)
        assert summary["format"] == s["fmt"] and {x["service"] for x in spans} == expected[seed]
        assert len(named(spans, search_bff.ROOT, "Server")) == 400
        clients = [x for x in spans if x["service"] == "search-bff" and x["kind"] == "Client"]
        assert bool(named(clients, "GET") + named(clients, "HTTP GET")) == s["client_spans"]
        new = "http.request.method" in named(spans, search_bff.ROOT)[0]["attrs"]
        assert new == (s["semconv"] == "new")
        bff_instances = {instance(x) for x in spans if x["service"] == "search-bff"}
        assert len(bff_instances) == (s["pods"] * s["procs"] if s["identity"] == "process" else s["pods"])
        names = {x["name"].lower() for x in spans}
        for scenario in search_bff.SCENARIOS:
            for cause in search_bff.truth(scenario, seed):
                where = {instance(x) for x in spans if x["service"] == cause.service}
                traced = cause.service == "search-bff" or (
                    cause.service == "ltr-reranker" and s["reranker_traced"])
                if traced:
                    assert cause.span.lower() in names and set(cause.instances) <= where, (scenario, cause)
                assert cause.instances and set(cause.side) <= {"queueing", "timeout_retry", "slow_dependency"}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_mark_compact_pauses_stretch_the_canary_processes_and_are_reported_as_gc_events(loaded) -> None:
    spans, summary = loaded[0]
    gc_cause = next(c for c in summary["truth"] if c["pattern"] == "gc_pause")
    roots = named(spans, search_bff.ROOT, "Server")
    majors = [r for r in roots if any(e["Attributes"].get("v8js.gc.type") == "major"
                                      and float(e["Attributes"]["gc.pause_ms"]) > 100 for e in r["events"])]
    assert len(majors) > 5 and {instance(r) for r in majors} <= set(gc_cause["instances"])
    assert min(r["duration"] for r in majors) > 100 * MS
    assert any(e["Attributes"].get("v8js.gc.type") == "minor" for r in roots for e in r["events"])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_search_waits_for_its_slowest_shard_and_the_merging_node_is_slow(loaded) -> None:
    spans, summary = loaded[0]
    slow = next(c for c in summary["truth"] if c["pattern"] == "slow_dependency")["instances"]
    query = named(spans, "indices:data/read/search[phase/query]")
    on_slow = [x["duration"] for x in query if instance(x) in slow]
    others = [x["duration"] for x in query if instance(x) not in slow]
    assert p(on_slow, 50) > 2.5 * p(others, 50) and p(on_slow, 99) > 60 * MS > p(others, 90)
    kids: dict[str, list[dict]] = {}
    for x in query:
        kids.setdefault(x["parent"], []).append(x)
    coords = {x["id"]: x for x in named(spans, "POST /{index}/_search")}
    assert all(coords[c]["end"] > max(q["end"] for q in qs) for c, qs in kids.items())


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_loop_block_stalls_every_request_of_the_scrapers_process(loaded) -> None:
    spans, summary = loaded[1]  # Jaeger, pod-level instances, no HTTP CLIENT spans
    (cause,) = summary["truth"]
    assert cause["pattern"] == "compute_bound" and cause["side"] == ["queueing"]
    norm = named(spans, "normalizeQuery")
    long = [x for x in norm if int(x["attrs"]["search.query.length"]) >= 300]  # the scraper's queries
    assert len(long) > 5 and {instance(x) for x in long} == set(cause["instances"])
    assert min(x["duration"] for x in long) > 30 * MS > p([x["duration"] for x in norm if x not in long], 95)
    roots = named(spans, search_bff.ROOT, "Server")
    pers = named(spans, spans_mod.PERS_SERVER, "Server")
    root_ids = {r["id"] for r in roots}
    assert all(x["parent"] in root_ids for x in pers)  # no CLIENT span between


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_timed_out_calls_end_at_the_deadline_in_error_and_are_retried_once(loaded) -> None:
    spans, summary = loaded[2]  # Zipkin: names lower-case, instances are ip:port endpoints
    assert summary["truth"][0]["pattern"] == "timeout_retry"
    calls = [x for x in named(spans, "get", "Client") if "personalization" in x["attrs"].get("url.full", "")]
    failed = [x for x in calls if x["status"] == "Error"]
    assert len(failed) > 20
    assert all(150 * MS <= x["duration"] < 153 * MS for x in failed)
    per_trace: dict[str, list[dict]] = {}
    for x in calls:
        per_trace.setdefault(x["trace"], []).append(x)
    for x in failed:
        attempts = sorted(per_trace[x["trace"]], key=lambda a: a["start"])
        assert len(attempts) == 2 and (attempts[0] is x or attempts[1] is x)
        assert attempts[1]["start"] >= attempts[0]["end"]


def _gap(spans: list[dict], client: str, server: str) -> list[tuple[dict, float]]:
    """(client span, client start -> its server's start) for each call that reached the server."""
    by_parent = {x["parent"]: x for x in spans if x["name"] == server}
    return [(c, by_parent[c["i"]]["start"] - c["start"]) for c in spans
            if c["name"] == client and c["i"] in by_parent]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_blocked_loop_stretches_the_requests_in_flight_on_that_process_only() -> None:
    spans = table_spans("loop-block", 500, 0)
    blocks = [x for x in spans if x["name"] == search_bff.NORMALIZE and x["end"] - x["start"] > 30 * MS]
    (res,) = {x["res"] for x in blocks}
    scraped = {x["trace"] for x in blocks}
    roots = [x for x in spans if x["name"] == search_bff.ROOT and x["trace"] not in scraped]

    def straddled(r: dict) -> list[float]:  # the blocks that began while the request was in flight
        return [b["end"] - b["start"] for b in blocks if r["start"] < b["start"] < r["end"]]

    mine = [r for r in roots if r["res"] == res and straddled(r)]
    others = [r for r in roots if r["res"] != res and straddled(r)]
    assert len(mine) > 3 and all(r["end"] - r["start"] > min(straddled(r)) for r in mine)
    assert np.mean([r["end"] - r["start"] > max(straddled(r)) for r in others]) < 0.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gunicorn_backlog_grows_in_the_burst_and_not_in_steady() -> None:
    burst = _gap(table_spans("rerank-burst", 600, 0), "POST", spans_mod.RERANK_SERVER)
    steady = _gap(table_spans("steady", 400, 0), "POST", spans_mod.RERANK_SERVER)
    waits = np.array([w for _, w in sorted(burst, key=lambda cw: cw[0]["start"])])
    assert waits.max() > 150 * MS > 60 * MS > p([w for _, w in steady], 99)  # some healthy waiting
    assert np.median(waits[: len(waits) // 6]) < 3 * MS  # before the burst


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_recycled_workers_load_the_model_on_their_first_request_then_warm_up() -> None:
    spans = table_spans("worker-recycle", 600, 1, max_requests=30)
    predict = [x for x in spans if x["name"] == "lightgbm.predict"]
    per_worker: dict[int, list[dict]] = {}
    for x in predict:
        per_worker.setdefault(x["res"], []).append(x)
    in_order = [sorted(v, key=lambda x: x["start"]) for v in per_worker.values()]
    cold = [v for v in in_order if v[0]["end"] - v[0]["start"] > 500 * MS]
    assert len(cold) >= 5 and len(per_worker) > search_bff.setup(1)["rerank_pods"] * 2  # new pids
    steady = [x["end"] - x["start"] for x in table_spans("steady", 400, 1) if x["name"] == "lightgbm.predict"]
    assert max(steady) < 100 * MS
    # the requests after the first: slower while the worker's feature cache fills, then as steady
    early = [x["end"] - x["start"] for v in cold for x in v[1:6]]
    late = [x["end"] - x["start"] for v in cold for x in v[35:]]
    assert np.median(early) > 80 * MS > 2 * np.median(steady) and np.median(late) < 1.5 * np.median(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_memcached_restart_sends_its_key_range_to_the_database() -> None:
    spans = table_spans("memcached-restart", 700, 2)
    db = sorted((x for x in spans if x["name"] == "SELECT catalog.products"), key=lambda x: x["start"])
    restart = 0.25 * 700 / search_bff.setup(2)["rps"] * 1e9
    before = [x["attrs"]["db.ids"] for x in db if x["start"] < restart]
    after = [x["attrs"]["db.ids"] for x in db if x["start"] >= restart]
    roots = sum(1 for x in spans if x["name"] == search_bff.ROOT)
    assert np.mean(after) > 2 * np.mean(before)
    assert len(after) / (0.75 * roots) > 1.3 * len(before) / (0.25 * roots)  # more requests query it
    ids = np.array([x["attrs"]["db.ids"] for x in db])
    durations = np.array([x["end"] - x["start"] for x in db])
    assert np.corrcoef(ids, durations)[0, 1] > 0.6


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_socket_pool_waits_are_for_sockets_other_calls_of_the_process_hold() -> None:
    spans = table_spans("socket-pool", 500, 0)
    gaps = _gap(spans, "GET", spans_mod.PERS_SERVER)
    assert p([w for _, w in gaps], 95) > 15 * MS
    steady = table_spans("steady", 400, 0)
    assert p([w for _, w in _gap(steady, "GET", spans_mod.PERS_SERVER)], 99) < 2 * MS
    calls = [x for x in spans if x["name"] == "GET"]
    waited = [c for c, w in gaps if w > 10 * MS]
    for c in waited[:50]:  # another call of the same process was holding the one socket
        assert any(o["res"] == c["res"] and o["start"] < c["start"] < o["end"] for o in calls if o is not c)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_large_pages_grow_the_serialisation_with_the_body() -> None:
    spans = table_spans("large-pages", 400, 1)
    ser = [x for x in spans if x["name"] == search_bff.SERIALIZE]
    size = np.array([x["attrs"]["http.response_content_length"] for x in ser])
    took = np.array([x["end"] - x["start"] for x in ser])
    assert (size > 1_000_000).mean() > 0.25
    assert np.median(took[size > 1_000_000]) > 4 * np.median(took[size < 200_000])
    steady = [x["attrs"]["http.response_content_length"] for x in table_spans("steady", 300, 1)
              if x["name"] == search_bff.SERIALIZE]
    assert max(steady) < 200_000
