"""The blind family `python-istio` (reference_pipeline/simulate/python_istio.py; held out): each seed's
format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way a blocked asyncio loop,
CPython's full collections, the GIL, Envoy's per-try timeout, the slowest OpenSearch shard, a TTL
expiry wave, an exhausted asyncpg pool, cold autoscaled replicas, a long batch wait or a slow Kafka
broker behind a fire-and-forget producer would produce it (a steady run of the same seed does not).
Three runs go through the loader; the other mechanisms are read from the generated table."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, python_istio
from reference_pipeline.simulate import python_istio_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_python_istio.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "python-istio"
N = 1000


@cache
def spans(scenario: str, seed: int, n: int = N) -> tuple[dict, ...]:
    return table_span_dicts(python_istio, scenario, n, seed)


def tops(run) -> list[dict]:
    """Each search's trace root (the caller's fetch or Envoy's inbound span)."""
    return [x for x in run if x["parent"] == -1 and "facets" not in x["name"]]


def p99(scenario: str, seed: int, n: int = N) -> float:
    """The p99 of the searches' end-to-end latency, from the generated table's trace roots."""
    table = python_istio.generate(scenario, n, seed) if n != N else None
    if table is None:
        return p([x["duration"] for x in tops(spans(scenario, seed))], 99)
    return p([r[7] - r[6] for r in table.rows if r[1] == -1 and "facets" not in r[2]], 99)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("python-istio")
    runs = {0: ("worker-heap-growth", 700), 1: ("sync-db-call", 500), 2: ("overloaded-replica", 700)}
    return {
        seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
        for seed, (scenario, n) in runs.items()
    }


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.MODULES[FAMILY] == "python_istio"  # open now
    assert blind.scenarios(FAMILY) == python_istio.SCENARIOS and python_istio.SCENARIOS[0] == "steady"
    assert sum("+" in sc for sc in python_istio.SCENARIOS) == 3 and len(python_istio.SINGLES) == 10
    for seed, (run, summary) in loaded.items():
        s = python_istio.setup(seed)
        assert summary["format"] == s["fmt"]
        services = {x["service"] for x in run}
        mesh = {sp.MESH[sp.API], sp.MESH[sp.EMB]}
        assert services == {sp.API, sp.EMB} | (mesh if s["envoy"] else {sp.FRONT})
        assert any(x["attrs"].get("component") == "proxy" for x in run) == s["envoy"]
        roots = named(run, sp.ROOT, "Server")
        assert len(roots) == summary["requests"] - len(named(run, sp.FACETS, "Server"))
        assert all(x["parent"] for x in roots)  # under the caller's fetch or Envoy's inbound span
        db = named(run, sp.SELECT)[0]["attrs"]
        assert ("db.query.text" in db and "server.address" in db) == (s["semconv"] == "new")
        assert ("db.statement" in db and "net.peer.name" in db) == (s["semconv"] == "old")
        names = {x["name"].lower() for x in run}
        assert (sp.TOKENIZE in names and sp.FORWARD in names) == s["internals"]
        gc_events = [e for x in roots for e in x["events"] if e["Name"] == "gc"]
        assert bool(gc_events) == (s["gc"] == "events")
        attr = [x for x in roots if "process.runtime.cpython.gc.pause_ms" in x["attrs"]]
        assert bool(attr) == (s["gc"] == "attribute")
        api = {x["instance"] for x in roots}
        emb = {x["instance"] for x in named(run, sp.EMBED_ROOT, "Server")}
        workers = s["pods"] * (s["workers"] if s["ident"] == "host-pid" else 1)
        assert len(api) == workers and len(emb) == s["replicas"]
        for scenario in python_istio.SCENARIOS:
            for cause in python_istio.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                if scenario != "embedder-burst":  # its replicas are born in its own run (tested below)
                    assert set(cause.instances) <= (api if cause.service == sp.API else emb), (
                        scenario,
                        cause,
                    )
                assert cause.stage in (
                    None,
                    "queue",
                    "preprocessing",
                    "feature_hydration",
                    "downstream",
                    "model_forward",
                )
    assert python_istio.truth("slow-kafka-broker", 0) == () and python_istio.truth("steady", 1) == ()
    with pytest.raises(ValueError, match="unknown python-istio scenario"):
        python_istio.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_synchronous_call_in_an_async_handler_holds_every_request_of_its_worker(loaded) -> None:
    run, _ = loaded[1]  # host.name + process.pid: one instance per uvicorn worker
    by_id = {x["id"]: x for x in run}
    blocks = [x for x in named(run, sp.SELECT) if x["attrs"].get("db.name") == "synonyms"]
    assert 15 <= len(blocks) <= 70 and p([x["duration"] for x in blocks], 50) > 40 * MS
    held = 0
    for block in blocks:
        for root in named(run, sp.ROOT, "Server"):
            caller = by_id[root["parent"]]
            if root["instance"] == block["instance"] and block["start"] < caller["start"] < block["end"] - MS:
                assert root["start"] >= block["end"]  # the loop took it only when the call returned
                held += 1
    assert held >= 5
    assert not [x for x in named(spans("steady", 1), sp.SELECT) if x["attrs"].get("db.name") == "synonyms"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_growing_heap_makes_one_workers_full_collections_longer_and_longer(loaded) -> None:
    run, _ = loaded[0]  # gc span events, Envoy's inbound span before the loop takes the request
    (cause,) = python_istio.truth("worker-heap-growth", 0)
    pauses: dict[str, list[tuple[int, float]]] = {}
    for root in named(run, sp.ROOT, "Server"):
        for e in root["events"]:
            if e["Name"] == "gc":
                pauses.setdefault(root["instance"], []).append(
                    (root["start"], float(e["Attributes"]["gc.pause_ms"]))
                )
    long = {inst for inst, v in pauses.items() if max(ms for _, ms in v) > 100}
    assert long == set(cause.instances)
    big = sorted(v for v in pauses[cause.instances[0]] if v[1] > 100)
    assert len(big) >= 3 and big[-1][1] > 1.8 * big[0][1]  # each collection scans more objects
    assert all(ms < 60 for inst, v in pauses.items() if inst not in long for _, ms in v)
    by_id = {x["id"]: x for x in run}
    waited = {
        r["instance"]
        for r in named(run, sp.ROOT, "Server")
        if r["start"] - by_id[r["parent"]]["start"] > 80 * MS
    }
    assert waited == set(cause.instances)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_pure_python_tokenizer_holds_the_gil_and_the_loop_waits_for_it() -> None:
    slow, steady = spans("python-tokenizer", 0), spans("steady", 0)
    toks = named(slow, sp.TOKENIZE)
    assert {x["attrs"]["tokenizer.backend"] for x in toks} == {"python"}
    assert {x["attrs"]["tokenizer.backend"] for x in named(steady, sp.TOKENIZE)} == {"rust"}
    long = [x for x in toks if x["attrs"]["tokens.count"] > 300]
    assert all(x["duration"] > 0.05 * MS * x["attrs"]["tokens.count"] for x in long)
    assert p([x["duration"] for x in named(steady, sp.TOKENIZE)], 99) < 10 * MS
    # the loop's own steps wait for the GIL: a Redis GET (two loop steps) gets slower
    assert (
        p([x["duration"] for x in named(slow, sp.GET)], 95)
        > p([x["duration"] for x in named(steady, sp.GET)], 95) + 2 * MS
    )


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_per_try_timeouts_against_an_overloaded_replica_are_retried_elsewhere() -> None:
    run = spans("overloaded-replica", 2)  # Envoy's spans
    inbound = [x for x in run if x["service"] == sp.MESH[sp.EMB] and x["kind"] == "Server"]
    reset = [x for x in inbound if x["attrs"]["response_flags"] == "DR"]
    assert len(reset) >= 5 and len({x["instance"] for x in reset}) == 1
    assert all(195 * MS < x["duration"] < 215 * MS for x in reset)
    by_parent = kids(run)
    retried = 0
    for out in (x for x in run if x["service"] == sp.MESH[sp.API] and x["kind"] == "Client"):
        tries = sorted(by_parent[out["i"]], key=lambda x: x["start"])
        if len(tries) > 1:
            retried += 1
            assert (
                tries[0]["attrs"]["response_flags"] == "DR" and tries[0]["instance"] != tries[1]["instance"]
            )
            assert tries[1]["start"] >= tries[0]["start"] + 199 * MS
            handler = by_parent[tries[0]["i"]][0]  # the replica's handler keeps going after the reset
            assert handler["end"] > tries[0]["end"]
    assert retried >= 5
    assert not [x for x in spans("steady", 2) if x["attrs"].get("response_flags") == "DR"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_merging_node_slows_its_shard_and_every_knn_query_waits_for_it() -> None:
    def took(scenario):
        return [x["attrs"]["opensearch.took_ms"] for x in named(spans(scenario, 1), sp.KNN)]

    merged, steady = took("segment-merge"), took("steady")
    assert p(merged, 75) > 3 * p(steady, 75) and p(steady, 99) < 30


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_ttl_wave_turns_hits_into_recomputes_until_keys_are_written_back() -> None:
    run = spans("ttl-expiry-wave", 2)
    roots = sorted(named(run, sp.ROOT, "Server"), key=lambda x: x["start"])
    end = roots[-1]["start"]
    miss = [not x["attrs"]["search.cache.hit"] for x in roots]
    before = [m for r, m in zip(roots, miss, strict=True) if r["start"] < 0.28 * end]
    after = [m for r, m in zip(roots, miss, strict=True) if 0.32 * end < r["start"] < 0.5 * end]
    late = [m for r, m in zip(roots, miss, strict=True) if r["start"] > 0.85 * end]
    assert np.mean(before) < 0.12 and np.mean(after) > 0.3 and np.mean(late) < np.mean(after)
    children = kids(run)
    for root in roots:
        names = {x["name"] for x in children[root["i"]]}
        assert (sp.KNN in names) != root["attrs"]["search.cache.hit"] and (sp.SET in names) <= (
            sp.KNN in names
        )


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_slow_facet_aggregates_hold_the_asyncpg_pool_and_searches_wait_for_a_connection() -> None:
    def waits(scenario):
        run = spans(scenario, 0)
        children = kids(run)
        fetch = named(run, sp.META)
        facets = [x["duration"] for x in named(run, sp.SELECT) if "GROUP BY" in x["attrs"]["db.query.text"]]
        return [children[x["i"]][0]["start"] - x["start"] for x in fetch], facets

    (slow, facets), (steady, steady_facets) = waits("slow-metadata-query"), waits("steady")
    assert p(slow, 99) > 100 * MS and p(steady, 99) < 5 * MS
    assert p(facets, 50) > 1000 * MS and p(steady_facets, 50) < 100 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_autoscaled_replicas_start_cold_and_their_slow_first_batches_time_out() -> None:
    run, steady = spans("embedder-burst", 0, 2000), spans("steady", 0, 2000)
    (cause,) = python_istio.truth("embedder-burst", 0)
    forward = named(run, sp.FORWARD)
    old = {x["instance"] for x in named(steady, sp.FORWARD)}
    new = {x["instance"] for x in forward} - old
    assert new == set(cause.instances)
    first = min(x["start"] for x in forward if x["instance"] in new)
    assert first > 0.3 * max(x["start"] for x in forward)  # ready seconds after the burst began
    warm = np.median([x["duration"] for x in forward if x["instance"] in old])
    for inst in new:
        mine = sorted((x for x in forward if x["instance"] == inst), key=lambda x: x["start"])
        assert len(mine) >= 8 and np.median([x["duration"] for x in mine[:4]]) > max(5 * warm, 200 * MS)
    # Envoy's per-try timeout cuts the attempts that land on them and retries elsewhere
    by_parent = kids(run)
    outbound = [x for x in run if x["service"] == sp.MESH[sp.API] and x["kind"] == "Client"]  # seed 0: Envoy
    retried = [x for x in outbound if len(by_parent[x["i"]]) > 1]
    assert len(retried) >= 10


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_long_batch_wait_holds_each_miss_until_the_timeout_at_this_arrival_rate() -> None:
    slow = [x["duration"] for x in named(spans("batch-wait-100ms", 1), sp.WAIT)]
    steady = [x["duration"] for x in named(spans("steady", 1), sp.WAIT)]
    assert p(slow, 50) > 40 * MS and p(slow, 90) > 85 * MS and p(steady, 50) < 10 * MS
    sizes = [x["attrs"]["batch.size"] for x in named(spans("batch-wait-100ms", 1), sp.WAIT)]
    assert max(sizes) < 16  # the batch never fills: the timeout sets the wait


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_kafka_broker_stretches_producer_spans_after_the_response_and_no_search() -> None:
    run, steady = spans("slow-kafka-broker", 2), spans("steady", 2)
    by_i = {x["i"]: x for x in run}
    sends = named(run, sp.SEND, "Producer")
    assert len(sends) == len(named(run, sp.ROOT, "Server"))
    assert all(x["start"] > by_i[x["parent"]]["end"] for x in sends)  # a BackgroundTask, after the response
    assert p([x["duration"] for x in sends], 50) > 300 * MS
    assert p([x["duration"] for x in named(steady, sp.SEND, "Producer")], 99) < 60 * MS
    assert p99("slow-kafka-broker", 2) == pytest.approx(p99("steady", 2), rel=0.03)
    assert python_istio.truth("slow-kafka-broker", 2) == ()


SEED_OF = {
    "sync-db-call": 1,
    "worker-heap-growth": 0,
    "python-tokenizer": 0,
    "overloaded-replica": 2,
    "segment-merge": 1,
    "ttl-expiry-wave": 2,
    "slow-metadata-query": 0,
    "batch-wait-100ms": 1,
}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_every_planted_cause_moves_the_p99_of_its_seed() -> None:
    for scenario, seed in SEED_OF.items():
        assert p99(scenario, seed) > 1.3 * p99("steady", seed), scenario
    assert p99("embedder-burst", 0, 2000) > 1.3 * p99("steady", 0, 2000)  # the autoscaler needs seconds
    assert set(SEED_OF) | {"embedder-burst"} | set(python_istio.NO_CAUSE) == set(python_istio.SINGLES)


def _signature(part: str, run) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "worker-heap-growth":
        return any(float(e[2]["gc.pause_ms"]) > 100 for x in named(run, sp.ROOT) for e in x["events"])
    if part == "segment-merge":
        return p([x["attrs"]["opensearch.took_ms"] for x in named(run, sp.KNN)], 75) > 25
    if part == "ttl-expiry-wave":
        return np.mean([not x["attrs"]["search.cache.hit"] for x in named(run, sp.ROOT)]) > 0.2
    if part == "batch-wait-100ms":
        return p([x["duration"] for x in named(run, sp.WAIT)], 50) > 40 * MS
    if part == "python-tokenizer":
        return {x["attrs"]["tokenizer.backend"] for x in named(run, sp.TOKENIZE)} == {"python"}
    assert part == "slow-metadata-query"
    return (
        p([x["duration"] for x in named(run, sp.SELECT) if "GROUP BY" in x["attrs"]["db.query.text"]], 50)
        > 1e9
    )


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", python_istio.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in python_istio.truth(pair, 0)] == [
        python_istio.truth(x, 0)[0].pattern for x in parts
    ]
    both, steady = spans(pair, 0), spans("steady", 0)
    for part in parts:
        assert _signature(part, both) and not _signature(part, steady), part
    assert p99(pair, 0) > 1.3 * p99("steady", 0)
