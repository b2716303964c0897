"""The blind family `pgvector-search` (reference_pipeline/simulate/pgvector_search.py; held out): each
seed's format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way PgBouncer's queue, a
cold page cache, a checkpoint's sync phase, a selective filter, a plan flip, a capped EBS volume,
TorchServe's batch queue, Go's collector near GOMEMLIMIT or replica lag would produce it (a steady run
of the same seed does not). Three runs go through the loader; the other mechanisms are read from the
generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, pgvector_search
from reference_pipeline.simulate import pgvector_search_spans as sp
from reference_pipeline.simulate.trace_table import TraceTable
from tests.blind_support import instance_label, load_run, named, p, span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_pgvector_search.py::"
    "test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "pgvector-search"


@cache
def table_of(scenario: str, requests: int, seed: int) -> TraceTable:
    return pgvector_search.generate(scenario, requests, seed)


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    """The generated table's spans as dicts (tests/blind_support.table_span_dicts' shape, times from
    the run's start), from the table the p99 test made too."""
    return span_dicts(table_of(scenario, requests, seed), pgvector_search.setup(seed)["fmt"] == "zipkin")


def run_ns(requests: int, seed: int) -> float:
    return requests / pgvector_search.setup(seed)["rps"] * 1e9


def host(span: dict) -> str:
    return span["attrs"].get("server.address") or span["attrs"]["net.peer.name"]


def tenant_of(spans) -> dict[int, str]:
    """Each SQL span's index -> its request's tenant (the root's `tenant.id`)."""
    roots = {x["i"]: x["attrs"]["tenant.id"] for x in spans
             if x["parent"] == -1 and "tenant.id" in x["attrs"]}
    return {x["i"]: roots[x["parent"]] for x in spans if x["parent"] in roots}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("pgvector-search")
    runs = {0: ("pgbouncer-burst", 600), 1: ("heap-near-memlimit", 400), 2: ("reembed-job", 300)}
    out = {}
    for seed, (scenario, n) in runs.items():
        spans, summary = load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
        first = min(x["start"] for x in spans)
        for x in spans:
            x["at"] = x["start"] - first
        out[seed] = (spans, summary)
    return out


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == pgvector_search.SCENARIOS  # open now
    assert sum("+" in sc for sc in pgvector_search.SCENARIOS) == 3
    assert pgvector_search.SCENARIOS[0] == "steady"
    assert 9 <= len(pgvector_search.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, style = pgvector_search.setup(seed), pgvector_search.style(seed)
        assert summary["format"] == s["fmt"]
        traced = s["torchserve"] != "none"
        assert {x["service"] for x in spans} == ({sp.API, sp.EMB} if traced else {sp.API})
        roots = named(spans, style.root, "Server")
        assert len(roots) == len([x for x in spans if x["service"] == sp.API and not x["parent"]])
        assert not any(x["parent"] for x in roots) and len(roots) <= summary["requests"]
        query = named(spans, sp.QUERY)[0]["attrs"]
        assert ("server.address" in query) == (s["semconv"] == "new")
        assert ("net.peer.name" in query) == (s["semconv"] == "old")
        assert any(k in query for k in ("db.query.text", "db.statement")) == s["statement"]
        names = {x["name"].lower() for x in spans}
        assert (sp.TS_SERVER.lower() in names) == traced
        queued = [x for x in named(spans, sp.TS_SERVER) if "ts.queue_time_ms" in x["attrs"]]
        assert bool(queued) == (s["torchserve"] == "queue-attr")
        api = {x["instance"] for x in roots}
        emb = {x["instance"] for x in spans if x["service"] == sp.EMB}
        assert len(api) == s["api_pods"] and len(emb) == (s["emb_pods"] if traced else 0)
        assert ("service.instance.id" in roots[0]["resource"]) == (s["ident"] != "endpoint")
        assert all(":" in a for a in api) == (s["ident"] != "pod")
        gc = [e for x in roots for e in x["events"]]
        assert bool(gc) == s["gc_events"]
        for scenario in pgvector_search.SCENARIOS:
            for cause in pgvector_search.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                assert set(cause.instances) <= (api if cause.service == sp.API else emb), (scenario, cause)
                assert cause.stage in (None, "queue", "downstream")
    with pytest.raises(ValueError, match="unknown pgvector-search scenario"):
        pgvector_search.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_fills_the_pgbouncer_pools_and_transactions_wait_inside_begin(loaded) -> None:
    spans, _ = loaded[0]
    run = run_ns(600, 0)
    begins = named(spans, sp.BEGIN)
    late = [x["duration"] for x in begins if x["duration"] > 20 * MS]
    assert len(late) > 15 and max(late) > 40 * MS
    at = np.array([x["at"] for x in begins if x["duration"] > 20 * MS]) / run
    assert np.percentile(at, 5) > 0.35 and np.percentile(at, 95) < 0.6  # only in and just after the burst
    outside = [x["duration"] for x in begins if x["at"] < 0.3 * run or x["at"] > 0.7 * run]
    assert p(outside, 99) < 2 * MS
    steady = named(spans_of("steady", 2000, 0), sp.BEGIN)
    assert p([x["duration"] for x in steady], 100) < 3 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_restarted_replica_reads_from_disk_and_warms_slowly() -> None:
    run = run_ns(2000, 0)
    spans = spans_of("replica-restart", 2000, 0)
    one = sorted((x for x in named(spans, sp.QUERY) if host(x) == sp.bouncer_host(sp.REPLICA_1)),
                 key=lambda x: x["start"])
    two = [x["duration"] for x in named(spans, sp.QUERY) if host(x) == sp.bouncer_host(sp.REPLICA_2)]
    before = [x["duration"] for x in one if x["start"] < 0.12 * run]
    after = [x for x in one if x["start"] > 0.12 * run]
    assert not [x for x in after if 0.12 * run + 0.1e9 < x["start"] < 0.12 * run + 1.4e9]  # down
    early, late = [x["duration"] for x in after[:60]], [x["duration"] for x in after[-200:]]
    assert np.median(early) > 8 * np.median(before) and np.median(early) > 1.4 * np.median(late)
    assert np.median(late) > 3 * np.median(two)
    steady = [x["duration"] for x in named(spans_of("steady", 2000, 0), sp.QUERY)]
    assert 0.7 < np.median(two) / np.median(steady) < 1.3


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_checkpoint_sync_phases_slow_every_insert_for_seconds_at_a_time() -> None:
    spans = spans_of("checkpoint-storm", 2000, 0)
    inserts = sorted((x for x in named(spans, sp.EXEC) if host(x) == sp.bouncer_host(sp.PRIMARY)),
                     key=lambda x: x["start"])
    slow = np.array([x["start"] for x in inserts if x["duration"] > 10 * MS])
    assert 0.15 < len(slow) / len(inserts) < 0.6
    gaps = np.diff(slow) / 1e9
    windows = 1 + int(np.sum(gaps > 1.0))  # slow inserts come in runs, one per sync phase
    assert 3 <= windows <= run_ns(2000, 0) / 1e9 / 2.0 and np.median(gaps) < 0.05
    queries = [x["duration"] for x in named(spans, sp.QUERY)]
    steady = spans_of("steady", 2000, 0)
    assert abs(np.median(queries) / np.median([x["duration"] for x in named(steady, sp.QUERY)]) - 1) < 0.15
    steady_inserts = [x["duration"] for x in named(steady, sp.EXEC) if host(x) == sp.bouncer_host(sp.PRIMARY)]
    assert p(steady_inserts, 99) < 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_selective_tenant_walks_far_in_proportion_to_its_selectivity() -> None:
    spans = spans_of("selective-tenant", 2000, 0)
    tenant = tenant_of(spans)
    by: dict[str, list[float]] = {}
    for x in named(spans, sp.QUERY):
        by.setdefault(tenant[x["i"]], []).append(x["duration"])
    lumen, pied = np.median(by.pop("lumen-legal")), np.median(by.pop("pied-piper"))
    others = max(np.median(v) for v in by.values())
    assert lumen > 2 * pied and pied > 3 * others
    steady = tenant_of(spans_of("steady", 2000, 0))
    assert "lumen-legal" not in steady.values()


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_plan_flip_turns_one_tenants_queries_into_exact_scans_from_then_on() -> None:
    run = run_ns(2000, 0)
    spans = spans_of("plan-flip", 2000, 0)
    tenant = tenant_of(spans)
    flip = [x for x in named(spans, sp.QUERY) if tenant[x["i"]] == pgvector_search.FLIP_TENANT]
    before = [x["duration"] for x in flip if x["start"] < 0.28 * run]
    after = [x["duration"] for x in flip if x["start"] > 0.32 * run]
    assert np.median(after) > 8 * np.median(before) and p(after, 5) > 3 * p(before, 95) / 2
    rest = [x["duration"] for x in named(spans, sp.QUERY) if tenant[x["i"]] != pgvector_search.FLIP_TENANT]
    steady = [x["duration"] for x in named(spans_of("steady", 2000, 0), sp.QUERY)]
    assert abs(np.median(rest) / np.median(steady) - 1) < 0.15


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_capped_volume_slows_queries_in_proportion_to_their_page_reads() -> None:
    spans = spans_of("ebs-credits", 2000, 0)
    tenant = tenant_of(spans)

    def median(server: int, name: str) -> float:
        return float(np.median([x["duration"] for x in named(spans, sp.QUERY)
                                if host(x) == sp.bouncer_host(server) and tenant[x["i"]] == name]))

    assert median(sp.REPLICA_2, "acme") > 1.5 * median(sp.REPLICA_1, "acme")
    # wayne (7.5 % of the rows) walks ~3x acme's (22 %) tuples: ~2.3x the page reads, so more added time
    added = {t: median(sp.REPLICA_2, t) - median(sp.REPLICA_1, t) for t in ("acme", "wayne")}
    assert added["wayne"] > 1.5 * added["acme"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_reembedding_job_queues_questions_behind_passages_in_torchserve(loaded) -> None:
    spans, _ = loaded[2]  # Zipkin: no TorchServe spans, only ask-api's client span
    run = run_ns(300, 2)
    calls = named(spans, pgvector_search.style(2).embed_client, "Client")
    before = [x["duration"] for x in calls if x["at"] < 0.12 * run]
    after = [x["duration"] for x in calls if x["at"] > 0.2 * run]
    assert np.median(after) > 3 * np.median(before) and np.median(before) < 12 * MS
    table = spans_of("reembed-job", 2000, 0)  # TorchServe's spans, with the queue time
    asks = {x["i"] for x in named(table, pgvector_search.style(0).embed_client, "Client")}
    server = [x for x in named(table, sp.TS_SERVER)
              if x["parent"] in asks and x["start"] > 0.2 * run_ns(2000, 0)]
    jobs = [x for x in named(table, sp.TS_SERVER) if x["parent"] == -1]
    assert len(jobs) > 1000 and all(x["attrs"]["input.tokens"] == 256 for x in jobs)
    queue = [x["attrs"]["ts.queue_time_ms"] for x in server]
    assert np.median(queue) > 8 and p(queue, 90) > 20
    infer = {x["parent"]: x for x in named(table, sp.TS_INFER)}
    assert all(abs((infer[x["i"]]["start"] - x["start"]) / MS - x["attrs"]["ts.queue_time_ms"]) < 0.01
               for x in server)
    steady = [x["attrs"]["ts.queue_time_ms"] for x in named(spans_of("steady", 2000, 0), sp.TS_SERVER)]
    assert p(steady, 99) < 6.5  # the batch delay, at most


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_heap_near_memlimit_runs_gc_back_to_back_on_one_pod(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger: GC cycles as logs on the server span
    gc_pod = pgvector_search.truth("heap-near-memlimit", 1)[0].instances
    roots = named(spans, pgvector_search.style(1).root, "Server")
    per_pod: dict[str, list[dict]] = {}
    for x in roots:
        per_pod.setdefault(x["instance"], []).append(x)
    share = {pod: np.mean([bool(x["events"]) for x in xs]) for pod, xs in per_pod.items()}
    (hot,) = gc_pod
    assert share[hot] > 0.05 and all(v < 0.03 for pod, v in share.items() if pod != hot)
    cycles = [e for x in per_pod[hot] for e in x["events"]]
    assert {e["Name"] for e in cycles} == {"go.gc"}
    assert {e["Attributes"]["go.memory.heap_goal_mb"] for e in cycles} == {"921"}  # clamped to the limit
    assert np.median([float(e["Attributes"]["go.gc.assist_ms"]) for e in cycles]) > 50
    by_id = {x["id"]: x for x in roots}
    rerank: dict[bool, list[float]] = {True: [], False: []}
    for x in named(spans, sp.RERANK):
        rerank[by_id[x["parent"]]["instance"] == hot].append(x["duration"])
    assert np.median(rerank[True]) > 5 * np.median(rerank[False])
    assert p([x["duration"] for x in per_pod[hot]], 90) > 1.5 * max(
        p([x["duration"] for x in xs], 90) for pod, xs in per_pod.items() if pod != hot)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_replica_lag_sends_reads_to_the_busy_primary() -> None:
    run = run_ns(2000, 0)
    spans = spans_of("replica-lag", 2000, 0)
    queries = named(spans, sp.QUERY)
    primary = [x for x in queries if host(x) == sp.bouncer_host(sp.PRIMARY)]
    at = np.array([x["start"] for x in primary]) / run
    assert len(primary) > 0.4 * len(queries) and at.min() > 0.24 and at.max() < 0.81
    replicas = [x["duration"] for x in queries if host(x) != sp.bouncer_host(sp.PRIMARY)]
    assert np.median([x["duration"] for x in primary]) > 2 * np.median(replicas)
    begins = [x["duration"] for x in named(spans, sp.BEGIN) if host(x) == sp.bouncer_host(sp.PRIMARY)]
    assert p(begins, 99) < 2 * MS  # slower statements, but the primary's reader pool never fills
    steady = named(spans_of("steady", 2000, 0), sp.QUERY)
    assert not [x for x in steady if host(x) == sp.bouncer_host(sp.PRIMARY)]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_every_planted_cause_moves_the_p99_at_2000_requests() -> None:
    """Seed 0 (the other seeds' figures: bench/RESULTS.md, family33's section)."""
    root = pgvector_search.style(0).root

    def p99(scenario: str) -> float:
        return p([r[7] - r[6] for r in table_of(scenario, 2000, 0).rows if r[2] == root], 99)

    base = p99("steady")
    for scenario in pgvector_search.SINGLES:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    style = pgvector_search.style(seed)
    if part == "pgbouncer-burst":
        return sum(x["duration"] > 20 * MS for x in named(spans, sp.BEGIN)) > 20
    if part == "replica-restart":
        one = [x["duration"] for x in named(spans, sp.QUERY) if host(x) == sp.bouncer_host(sp.REPLICA_1)]
        two = [x["duration"] for x in named(spans, sp.QUERY) if host(x) == sp.bouncer_host(sp.REPLICA_2)]
        return np.median(one) > 3 * np.median(two)
    if part == "checkpoint-storm":
        inserts = [x["duration"] for x in named(spans, sp.EXEC) if host(x) == sp.bouncer_host(sp.PRIMARY)]
        return np.mean(np.array(inserts) > 10 * MS) > 0.1
    if part == "reembed-job":
        return np.median([x["duration"] for x in named(spans, style.embed_client, "Client")]) > 20 * MS
    if part == "selective-tenant":
        return "lumen-legal" in set(tenant_of(spans).values())
    assert part == "heap-near-memlimit"
    gc_pod = pgvector_search.truth(part, seed)[0].instances[0]
    roots = {x["i"]: x for x in named(spans, style.root, "Server")}
    hot = [x["duration"] for x in named(spans, sp.RERANK) if roots[x["parent"]]["instance"] == gc_pod]
    return np.median(hot) > 4 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", pgvector_search.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    truth = pgvector_search.truth(pair, 0)
    assert [c.pattern for c in truth] == [pgvector_search.truth(x, 0)[0].pattern for x in parts]
    both, steady = spans_of(pair, 1000, 0), spans_of("steady", 2000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
