"""Diagnosis on trace shapes the detectors were not built on: detached queue consumers, a request whose
work runs on another service's instance, a handler span wrapping the request's work, a batch queue
span whose name no rule knows, a caller in another region, a read-through cache's fallback call.
Hand-built frames for the structure, and the simulator's held-out families (region, readthrough,
queue-worker; reference_pipeline/simulate/) through trace files and the real loader. The full matrix
is `bench/accuracy.py --topologies region,readthrough,queue-worker`."""

from __future__ import annotations

import pytest
from hand_frames import MS, hand_frame

from tailscope.analysis.diagnosis import diagnose
from tailscope.analysis.diagnosis.frame import root_waits
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.queueing import waits
from tailscope.store.duckdb.store import DuckDBStore as Store

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
loader = pytest.importorskip("ingest.loader")


def handed_on(traces: int = 3) -> list[tuple]:
    """An API span (instance 0) publishes a message; a worker (instance 1) consumes it after the
    publish has ended (a CONSUMER child of the PRODUCER span) and does the work."""
    rows: list[tuple] = []
    for t in range(traces):
        base, at = len(rows), 200.0 * t
        rows += [
            (t, -1, "POST /jobs", "Server", 0, at, 100.0),
            (t, base, "send jobs", "Producer", 0, at + 1, 1.0),
            (t, base + 1, "process jobs", "Consumer", 1, at + 5, 85.0),
            (t, base + 2, "work", "Internal", 1, at + 10, 70.0),
        ]
    return rows


def test_a_consumer_after_its_producer_is_not_the_api_span_own_time() -> None:
    f = hand_frame(handed_on())
    excl = {f.names[f.name[i]]: f.excl[i] / MS for i in range(4)}
    # the API's own time: 1 ms before publishing, 3 ms of hand-off, 10 ms after the reply
    assert excl == {"POST /jobs": 14.0, "send jobs": 1.0, "process jobs": 15.0, "work": 70.0}


def test_a_request_handed_to_a_worker_runs_on_the_worker_instance() -> None:
    f = hand_frame(handed_on())
    assert f.requests.instance.tolist() == [1, 1, 1]
    assert f.requests.root_instance.tolist() == [0, 0, 0]
    assert f.requests.index_on_instance.tolist() == [0, 1, 2]


def wrapped(traces: int = 4) -> list[tuple]:
    """A handler span covers the whole request; between its two children it waits 20 ms (a batch
    queue with no span of its own)."""
    rows: list[tuple] = []
    for t in range(traces):
        base, at = len(rows), 100.0 * t
        rows += [
            (t, -1, "POST /score", "Server", 0, at, 40.0),
            (t, base, "Controller.score", "Internal", 0, at + 0.5, 39.0),
            (t, base + 1, "encode", "Internal", 0, at + 1, 4.0),
            (t, base + 1, "predict", "Internal", 0, at + 25, 10.0),
        ]
    return rows


def test_a_handler_wrapping_the_request_holds_its_wait() -> None:
    f = hand_frame(wrapped())
    ctx = Context(f)
    assert [f.names[f.name[i]] for i in f.wrappers] == ["Controller.score"] * 4
    assert (waits(ctx) / MS).round(1).tolist() == [26.0] * 4  # 1 ms of the root + 25 ms of the handler
    owner, seg_s, seg_e = root_waits(f, f.request >= 0)
    assert {f.names[f.name[o]] for o in owner} == {"Controller.score"}
    assert ((seg_e - seg_s) / MS).tolist() == [20.0] * 4


REQUESTS = 2000
# run -> (family, scenario, seed[, requests]). The read-through runs and region's steady run show what their
# tests assert by the same margins at 1,000 requests as at 2,000, on their seed and two others (bench/
# RESULTS.md, suite17: 0.3-1.7 s of CPU less each); region's GC run (gc_pause 0.79 / 0.49 / 0.20 at 1,000
# against >= 0.8) and the worker's cold start (0.82 on one seed against >= 0.9) need 2,000.
RUNS = {
    "region-burst": ("region", "burst", 0),
    "region-gc": ("region", "gc-pressure", 1),
    "readthrough-burst": ("readthrough", "burst", 1, 1000),
    "readthrough-cold-cache": ("readthrough", "cold-cache", 0, 1000),
    "worker-gc": ("queue-worker", "gc-pressure", 0),
    "worker-cold-start": ("queue-worker", "cold-start", 0),
    "readthrough-gc-cold-cache": ("readthrough", "gc-pressure+cold-cache", 1, 1000),
    "worker-expiry-gc": ("queue-worker", "key-expiry+gc-pressure", 1),
    "region-steady": ("region", "steady", 1, 1000),
    "region-lock": ("region", "lock-contention", 0),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    tmp = tmp_path_factory.mktemp("families")
    db = tmp / "store.duckdb"
    for run, (family, scenario, seed, *size) in RUNS.items():
        fmt = "otlp-json" if seed % 2 == 0 else "jaeger"
        out = tmp / f"{run}.{'jsonl' if fmt == 'otlp-json' else 'json'}"
        simulate_api.simulate_to_file(
            out,
            scenario,
            size[0] if size else REQUESTS,
            seed,
            fmt=fmt,
            topology=family,
            load=(0.4, 0.5)[seed],
            workers=(2, 3)[seed],
        )
        loaded = loader.load_paths([out], db, run)
        assert not loaded.failed, [f.error for f in loaded.failed]
    return Store(db)


def _found(store: Store, run: str) -> list[tuple[str, str | None, float]]:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in diagnose(store, run).findings]


@pytest.mark.parametrize("run", ["region-burst", "readthrough-burst"])
def test_a_burst_behind_a_handler_or_an_unnamed_batch_queue_is_queueing_not_a_lock(store, run) -> None:
    # a controller span around the model's forward pass, or a batch queue span called `collect_batch`,
    # grows with the crowd in it: it was reported as lock_contention at 0.98-1.00
    found = _found(store, run)
    assert found[0][0] == "queueing" and found[0][2] >= 0.8, found
    assert not [f for f in found if f[0] == "lock_contention" and f[2] >= 0.5], found


def test_pauses_seen_across_a_long_wan_link_are_not_the_network(store) -> None:
    # the caller ~38 ms away: a pause delays the server's accept, so the client's gap grows too; the
    # network finding (0.77, above gc_pause) must discount gaps inside stalls however long the median
    found = _found(store, "region-gc")
    assert found[0][0] == "gc_pause" and found[0][2] >= 0.8, found
    assert not [f for f in found if f[0] == "network" and f[2] >= 0.5], found


def test_a_worker_behind_a_queue_pauses_and_restarts_on_its_own_instances(store) -> None:
    gc = _found(store, "worker-gc")
    assert gc[0][0] == "gc_pause" and gc[0][2] >= 0.8, gc  # was unexplained_tail 0.45, gc_pause 0.26
    cold = _found(store, "worker-cold-start")
    assert cold[0][0] == "cold_start" and cold[0][2] >= 0.9, cold  # was below the cache misses
    misses = [f for f in cold if f[0] == "cache_miss"]
    assert all(f[2] < cold[0][2] for f in misses), cold


def test_the_fallback_is_decided_by_the_nearest_lookup_and_is_no_slow_dependency(store) -> None:
    result = diagnose(store, "readthrough-cold-cache")
    top = result.findings[0]
    assert (top.pattern, top.span_name) == ("cache_miss", "SELECT user_features")
    assert top.evidence["stats"]["lookup_span"] == "GET"  # not the auth check that runs earlier
    assert not [
        f for f in result.findings if f.pattern == "slow_dependency" and f.span_name == "SELECT user_features"
    ]


def test_a_fallback_call_is_never_a_slow_dependency_even_when_pauses_make_the_tail(store) -> None:
    # GC pauses make this run's tail, so the fallback is no more frequent in slow requests than in
    # others and makes no cache_miss finding; it is still the miss path of a lookup, not a dependency
    # with a heavy tail (it was reported as slow_dependency at 0.53)
    found = _found(store, "readthrough-gc-cold-cache")
    assert found[0][0] == "gc_pause", found
    assert not [f for f in found if f[0] == "slow_dependency" and f[1] == "SELECT user_features"], found


def test_overwhelming_stall_evidence_is_said_with_confidence(store) -> None:
    # no GC events; every tail request sits in a stall longer than the median request, and those
    # stalls carry 63 % of the tail excess (90 % with the short ones): it was 0.49 (0.26 before the
    # work-instance fix), held down by a stall-bin ratio of 2.0
    result = diagnose(store, "worker-expiry-gc")
    gc = next(f for f in result.findings if f.pattern == "gc_pause")
    stats = gc.evidence["stats"]
    assert stats["tail_requests_in_long_stall"] >= 0.9 and stats["tail_excess_share_in_long_stalls"] >= 0.5
    assert gc.confidence >= 0.7, (gc.confidence, stats)


def test_co_slowness_no_longer_than_ordinary_work_is_no_pause(store) -> None:
    # steady traffic, a handler wrapping the batch queue: batches and the waits behind them are slow
    # together (a stall-bin ratio of 2.1), but never for longer than a request takes; it was gc_pause 0.56
    found = _found(store, "region-steady")
    assert not [f for f in found if f[2] >= 0.5 and f[0] != "compute_bound"], found


def test_a_lock_taken_after_other_work_inside_the_span_is_found(store) -> None:
    # the rule engine takes its lock after its own work, and the members of a batch enter it within
    # microseconds: by start order the requests ahead hardly predicted the duration (rho 0.36, hold
    # 0.57 ms), and nothing was reported; counted by cohort, rho ~0.5 and the hold ~1.2 ms
    result = diagnose(store, "region-lock")
    top = result.findings[0]
    assert (top.pattern, top.span_name) == ("lock_contention", "RuleEngine.apply"), _found(
        store, "region-lock"
    )
    assert top.confidence >= 0.5 and 0.8 <= top.evidence["stats"]["hold_ms"] <= 2.0, top.evidence["summary"]
