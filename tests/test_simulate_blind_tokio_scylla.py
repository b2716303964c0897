"""The blind family `tokio-scylla` (reference_pipeline/simulate/tokio_scylla.py; held out): each seed's
format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way a blocked tokio worker,
a full spawn_blocking pool, a hot Scylla shard, a compacting node, RocksDB's write stalls, raced DNS
packets, a provider's 429s, dropped SYNs, Nagle against delayed ACK or a heavier model would produce it
(a steady run of the same seed does not). Three runs go through the loader; the other mechanisms are
read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pytest

from reference_pipeline.simulate import blind, tokio_scylla
from reference_pipeline.simulate import tokio_scylla_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_tokio_scylla.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "tokio-scylla"
N = 1000  # requests per generated run (each run is generated once per module)


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(tokio_scylla, scenario, requests, seed)


def run_ns(requests: int, seed: int) -> float:
    return requests / tokio_scylla.setup(seed)["rps"] * 1e9


def peer(attrs: dict) -> str:
    return attrs.get("server.address") or attrs["net.peer.name"]


def server_waits(spans) -> list[float]:
    """How long after the gateway's CLIENT span started the handler's SERVER span did."""
    by_i = {x["i"]: x for x in spans}
    return [x["start"] - by_i[x["parent"]]["start"] for x in spans
            if x["service"] == sp.API and x["kind"] == "Server"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("tokio-scylla")
    runs = {0: ("inline-rerank", 300), 1: ("provider-rate-limit", 300), 2: ("scylla-compaction", 300)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == tokio_scylla.SCENARIOS  # open now
    assert len(tokio_scylla.SINGLES) == 10 and len(tokio_scylla.PAIRS) == 3
    for seed, (spans, summary) in loaded.items():
        s, style = tokio_scylla.setup(seed), tokio_scylla.style(seed)
        assert summary["format"] == s["fmt"] and summary["requests"] == 300
        assert {x["service"] for x in spans} == {sp.API, sp.GATEWAY}
        roots = [x for x in spans if not x["parent"]]
        assert len(roots) == 300 and {x["service"] for x in roots} == {sp.GATEWAY}
        names = {x["name"].lower() for x in spans}
        driver = any(x["name"].lower() == sp.DRIVER.lower() and x["kind"] == "Client" for x in spans)
        assert driver == s["internals"] == (sp.CONNECT in names)  # a few new connections in any run
        reads = (sp.DRIVER if s["internals"] else sp.USER).lower()
        user = next(x for x in spans if x["name"].lower() == reads)
        assert user["kind"] == "Client"
        attrs = user["attrs"]
        assert ("db.query.text" in attrs and "server.address" in attrs) == (s["semconv"] == "new")
        assert ("db.statement" in attrs and "net.peer.name" in attrs) == (s["semconv"] == "old")
        api = {x["instance"] for x in spans if x["service"] == sp.API}
        assert api == {style.label(sp.API, k) for k in range(s["pods"])}
        assert ("service.instance.id" in roots[0]["resource"]) == (s["ident"] == "instance-id")
        assert not any(x["events"] for x in spans if x["kind"] == "Server")  # no runtime events: Rust
        for scenario in tokio_scylla.SCENARIOS:
            for cause in tokio_scylla.truth(scenario, seed):
                assert cause.span.lower() in names and cause.service == sp.API, (scenario, cause)
                assert set(cause.instances) <= api, (scenario, cause)
    with pytest.raises(ValueError, match="unknown tokio-scylla scenario"):
        tokio_scylla.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_inline_reranker_holds_its_worker_and_the_co_scheduled_requests_start_late(loaded) -> None:
    spans, _ = loaded[0]
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    by_id = {x["id"]: x for x in spans}
    waits = [x["start"] - by_id[x["parent"]]["start"] for x in spans
             if x["service"] == sp.API and x["kind"] == "Server"]
    assert p(waits, 90) > 3 * MS and max(waits) > 15 * MS
    for rr in (x for x in spans if x["name"] == sp.RERANK):
        (ort,) = by_parent[rr["id"]]
        assert ort["start"] - rr["start"] < 0.05 * MS and rr["attrs"]["rerank.inline"] == "true"
    steady = spans_of("steady", 300, 0)
    assert p(server_waits(steady), 99) < 2 * MS
    ort_wait = [o["start"] - r["start"] for r in named(steady, sp.RERANK) for o in kids(steady)[r["i"]]]
    assert min(ort_wait) > 0  # spawn_blocking: the run starts on a blocking thread, after the hand-off


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_fills_the_blocking_pool_and_reranks_wait_for_a_thread() -> None:
    spans = spans_of("blocking-burst", N, 0)
    children = kids(spans)
    run, first = run_ns(N, 0), min(x["start"] for x in spans)  # the burst: 45-52 % of the nominal run
    inside, before = [], []
    for r in named(spans, sp.RERANK):
        (ort,) = children[r["i"]]
        at = (r["start"] - first) / run
        (inside if 0.47 < at < 0.53 else before if at < 0.4 else []).append(ort["start"] - r["start"])
    assert p(inside, 75) > 10 * MS and p(before, 99) < 1 * MS
    per_item = [o["duration"] / o["attrs"]["rerank.candidates"] for o in named(spans, sp.ORT)]
    steady = [o["duration"] / o["attrs"]["rerank.candidates"]
              for o in named(spans_of("steady", N, 0), sp.ORT)]
    assert p(per_item, 95) > 2 * p(steady, 95)  # the runs share the cores meanwhile


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_hot_anonymous_partition_queues_on_its_shard_on_every_replica() -> None:
    spans = spans_of("hot-partition", N, 0)
    users = named(spans, sp.USER)
    anon = [x["duration"] for x in users if x["attrs"]["user.anonymous"]]
    known = [x["duration"] for x in users if not x["attrs"]["user.anonymous"]]
    assert 0.2 < len(anon) / len(users) < 0.4
    assert p(anon, 50) > 5 * p(known, 50) and p(anon, 90) > 20 * MS and p(known, 99) < 5 * MS
    steady = named(spans_of("steady", N, 0), sp.USER)
    assert np.mean([x["attrs"]["user.anonymous"] for x in steady]) < 0.06
    # the partition's shard queues on every replica: whichever coordinates the read, it is slow
    children = kids(spans)
    by_node: dict[str, list[float]] = {}
    for u in named(spans, sp.USER):
        if u["attrs"]["user.anonymous"] and u["start"] > 0.2 * run_ns(N, 0):
            (attempt,) = children[u["i"]]
            by_node.setdefault(peer(attempt["attrs"]), []).append(u["duration"])
    assert len(by_node) == 3 and all(p(v, 50) > 5 * MS for v in by_node.values())


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_compacting_node_slows_the_reads_it_coordinates(loaded) -> None:
    spans, _ = loaded[2]
    by_node: dict[str, list[float]] = {}
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    for u in (x for x in spans if x["name"] == sp.USER.lower()):
        first = min(by_parent[u["id"]], key=lambda a: a["start"])  # the coordinator's attempt
        by_node.setdefault(peer(first["attrs"]), []).append(u["duration"])
    slow = by_node.pop(sp.NODES[tokio_scylla.COMPACTING_NODE])
    assert len(by_node) == 2 and all(p(slow, 75) > 4 * p(v, 75) for v in by_node.values())
    assert all(p(v, 95) < 3 * MS for v in by_node.values()) and p(slow, 95) > 20 * MS
    assert p([u["duration"] for u in named(spans_of("steady", N, 2), sp.USER)], 99) < 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_rocksdb_write_stalls_on_one_pod_hold_its_writers_and_their_workers() -> None:
    spans = spans_of("rocksdb-write-stall", N, 0)
    (cause,) = tokio_scylla.truth("rocksdb-write-stall", 0)
    puts: dict[str, list[float]] = {}
    for x in named(spans, sp.CACHE_PUT):
        puts.setdefault(x["instance"], []).append(x["duration"])
    (stalled,) = cause.instances
    assert p(puts.pop(stalled), 95) > 50 * MS and all(p(v, 99) < 6 * MS for v in puts.values())
    waits: dict[str, list[float]] = {}
    by_i = {x["i"]: x for x in spans}
    for x in spans:
        if x["service"] == sp.API and x["kind"] == "Server":
            waits.setdefault(x["instance"], []).append(x["start"] - by_i[x["parent"]]["start"])
    assert p(waits.pop(stalled), 99) > 20 * MS and all(p(v, 99) < 3 * MS for v in waits.values())


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_raced_dns_packets_cost_the_resolvers_5_s_timeout_on_new_connections() -> None:
    def resolves(scenario):
        return [x["duration"] for x in named(spans_of(scenario, N, 0), sp.RESOLVE)]

    raced, steady = resolves("dns-conntrack"), resolves("steady")
    assert len(raced) > 40 and len(steady) > 40
    lost = [d for d in raced if d > 4 * 1e9]
    assert len(lost) / len(raced) > 0.15 and all(d % 5e9 < 50 * MS for d in lost)  # whole 5 s timeouts
    assert sum(d > 4e9 for d in steady) / len(steady) < 0.05 and p(steady, 50) < 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_429s_inside_the_spent_window_are_retried_after_retry_after(loaded) -> None:
    spans, _ = loaded[1]
    children: dict[str, list[dict]] = {}
    for x in spans:
        children.setdefault(x["parent"], []).append(x)
    run = run_ns(300, 1)
    first = min(x["start"] for x in spans)
    limited = 0
    for prov in (x for x in spans if x["name"] == sp.PROVIDER):
        attempts = sorted(children[prov["id"]], key=lambda a: a["start"])
        for a, b in pairwise(attempts):
            assert a["status"] == "Error" and a["attrs"]["http.status_code"] == "429"
            assert b["start"] - a["end"] >= 1e9  # Retry-After: whole seconds
            assert (a["start"] - first) / run > 0.5
            limited += 1
        assert attempts[-1]["attrs"]["http.status_code"] == "200"
    assert limited > 20
    steady = named(spans_of("steady", 300, 1), "HTTP POST", "Client", sp.API)
    assert steady and all(x["attrs"]["http.status_code"] == 200 for x in steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_dropped_syns_after_the_pool_flush_cost_the_1_s_retransmission_timeout() -> None:
    spans = spans_of("syn-retransmit", N, 2)
    run = run_ns(N, 2)
    first = min(x["start"] for x in spans)
    connects = [((x["start"] - first) / run, x["duration"]) for x in named(spans, sp.CONNECT)]
    after = [d for at, d in connects if at >= 0.4]
    before = [d for at, d in connects if at < 0.38]
    assert max(before) < 100 * MS and sum(d > 1e9 for d in after) >= 10
    assert max(x["duration"] for x in named(spans_of("steady", N, 2), sp.CONNECT)) < 100 * MS
    assert all(abs(d - 1e9) < 40 * MS or d > 2.9e9 for d in after if d > 0.5e9)  # 1 s, or 1 s + 2 s


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_nagle_against_delayed_ack_adds_40_ms_to_every_call_on_a_reused_connection() -> None:
    def calls(scenario):
        spans = spans_of(scenario, N, 0)
        children = kids(spans)
        out = {"reused": [], "new": []}
        for c in named(spans, "POST", "Client", sp.API):
            out["new" if c["i"] in children else "reused"].append(c["duration"])
        return out

    nagle, steady = calls("nagle-delayed-ack"), calls("steady")
    shift = p(nagle["reused"], 50) - p(steady["reused"], 50)
    assert 36 * MS < shift < 46 * MS and p(nagle["reused"], 1) > 40 * MS
    assert p(nagle["new"], 50) < p(steady["new"], 50) + 10 * MS  # a new connection starts in quickack


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_heavier_reranker_costs_more_per_candidate() -> None:
    def per_item(scenario):
        runs = named(spans_of(scenario, N, 2), sp.ORT)
        return [x["duration"] / x["attrs"]["rerank.candidates"] for x in runs], {x["attrs"]["model.name"]
                                                                                 for x in runs}

    (swap, models), (steady, before) = per_item("reranker-swap"), per_item("steady")
    assert models == {sp.MODELS[1]} and before == {sp.MODELS[0]}
    assert 1.6 < p(swap, 25) / p(steady, 25) < 2.2


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"),
                         [(0, tokio_scylla.SINGLES[:5]), (2, tokio_scylla.SINGLES[5:])])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    style = tokio_scylla.style(seed)

    def p99(scenario):
        return p([x["duration"] for x in named(spans_of(scenario, N, seed), style.gateway)], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans) -> bool:
    """Whether a seed-0 run shows one mechanism's mark (the single-cause tests check each in depth)."""
    if part == "scylla-compaction":
        children = kids(spans)
        slow = [u["duration"] for u in named(spans, sp.USER)
                if peer(min(children[u["i"]], key=lambda a: a["start"])["attrs"])
                == sp.NODES[tokio_scylla.COMPACTING_NODE]]
        return p(slow, 75) > 5 * MS
    if part == "dns-conntrack":
        return sum(x["duration"] > 4e9 for x in named(spans, sp.RESOLVE)) >= 5
    if part == "hot-partition":
        return np.mean([x["attrs"]["user.anonymous"] for x in named(spans, sp.USER)]) > 0.2
    if part == "nagle-delayed-ack":
        children = kids(spans)
        reused = [c["duration"] for c in named(spans, "POST", "Client", sp.API) if c["i"] not in children]
        return p(reused, 5) > 40 * MS
    if part == "rocksdb-write-stall":
        return p([x["duration"] for x in named(spans, sp.CACHE_PUT)], 99) > 50 * MS
    assert part == "provider-rate-limit"
    return any(x["status"] == "Error" for x in named(spans, "POST", "Client", sp.API))


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", tokio_scylla.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in tokio_scylla.truth(pair, 0)] == [
        tokio_scylla.truth(x, 0)[0].pattern for x in parts]
    both, steady = spans_of(pair, N, 0), spans_of("steady", N, 0)
    for part in parts:
        assert _signature(part, both) and not _signature(part, steady), part
