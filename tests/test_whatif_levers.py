"""Each lever on a planted simulator run: the p99 it predicts for the run with the cause removed
matches the p99 measured on the same run (same seed) simulated without the cause."""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.load import load_frame
from tailscope.analysis.source import reading
from tailscope.analysis.whatif import evaluate, measured_speedup
from tailscope.analysis.whatif.retime import request_latency
from tailscope.store.engine import open_store

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
loader = pytest.importorskip("ingest.loader")
REQUESTS = 3000
# the stores a test's frames were read from: open until the test ends (the detectors read span
# attributes from them as they go)
OPEN = contextlib.ExitStack()


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    OPEN.close()


def frame(tmp_path, label: str, scenario: str, stores: contextlib.ExitStack = OPEN, **options):
    out = tmp_path / f"{label}.jsonl"
    simulate_api.simulate_to_file(out, scenario, REQUESTS, 1, **options)
    db = tmp_path / f"{label}.duckdb"
    assert not loader.load_paths([out], db, "run").failed
    return load_frame(stores.enter_context(reading(open_store(str(db)))), "run")


@pytest.fixture(scope="module")
def faulty_frame(tmp_path_factory):
    """A run with its cause, each (scenario, options) simulated and loaded once for the module (its
    store open until the module ends): the lever cases and the two tests after them read the same
    gc-pressure and cold-start runs."""
    frames: dict[str, object] = {}
    with contextlib.ExitStack() as stores:

        def of(scenario: str, **options):
            key = repr((scenario, sorted(options.items())))
            if key not in frames:
                folder = tmp_path_factory.mktemp("faulty")
                frames[key] = frame(folder, "faulty", scenario, stores=stores, **options)
            return frames[key]

        yield of
        DIAGNOSED.clear()  # their stores close here


def p99(f) -> float:
    client = bool((f.requests.client_span >= 0).mean() >= 0.5)
    return float(np.percentile(request_latency(f, f.dur, client), 99)) / 1e6


# the cache finding as the diagnosis words it, for a run where its detector does not name the cache
# (the lever is what is tested here: misses are the spans above the two modes' threshold)
CACHE_FINDING = {
    "pattern": "cache_miss",
    "confidence": 0.9,
    "span_name": "feature_hydration",
    "evidence": {"stats": {}, "chart": {"threshold_ms": 1.0}},
}


# each faulty frame's findings, diagnosed once for the module: the lever case and the two tests after it
# diagnose the same gc-pressure and cold-start frames (the frame kept beside them, so its id is not reused)
DIAGNOSED: dict[int, tuple[object, list[dict]]] = {}


def findings_of(f) -> list[dict]:
    """`[fd.to_dict(with_chart=True) for fd in diagnose_frame(f).findings]`, a copy of the module's."""
    if id(f) not in DIAGNOSED:
        DIAGNOSED[id(f)] = (f, [fd.to_dict(with_chart=True) for fd in diagnose_frame(f).findings])
    return copy.deepcopy(DIAGNOSED[id(f)][1])


def predicted(f, prefix: str, **options) -> tuple[float, float]:
    findings = findings_of(f)
    if prefix == "cache_hits" and not any(fd["pattern"] == "cache_miss" for fd in findings):
        findings.append(CACHE_FINDING)
    result = evaluate(f, findings, **options)
    hits = [o for o in result.outcomes if o.key.startswith(prefix)]
    assert hits, [o.key for o in result.outcomes]
    return hits[0].p99_ms, result.measured.p99_ms


CASES = [
    # scenario with the cause, options; the same without it; the lever that removes it
    ("gc-pressure", {}, "steady", {}, "no_gc_stalls"),
    # no GC reports: the pauses found from timing (the region family's caller wraps the server)
    ("gc-pressure", {"topology": "region"}, "steady", {"topology": "region"}, "no_gc_stalls"),
    ("lock-contention", {"load": 0.7}, "steady", {"load": 0.7}, "no_lock_wait"),
    ("slow-downstream", {}, "steady", {}, "dependency_p50"),
    ("network-jitter", {}, "steady", {}, "network_p50"),
    # misses that cost 15 ms (a remote store), so that the cold cache is material
    ("cold-cache", {"store_ms": (15.0, 0.5)}, "steady", {"store_ms": (15.0, 0.5)}, "cache_hits"),
    ("cold-start", {}, "cold-start", {"warm_start": True, "cache_prefill": True}, "prewarmed"),
    ("burst", {}, "steady", {}, "queue_as_calm"),
    # arrivals at a fixed rate (a load given as a share of capacity would grow with the workers)
    ("steady", {"rps": 700}, "steady", {"rps": 700, "workers": 4}, "replicas+1"),
]


def simulated_p99(scenario: str, **options) -> float:
    """The p99 of a simulated run's client latencies from the simulator's own arrays: what `p99` reads
    back from the run's frame after a file, the loader and the store, to the bit (all six runs of CASES
    below, seed 1, 3,000 requests: bench/RESULTS.md, suite20), without that load."""
    sim = simulate_api.simulate(simulate_api.scenario_config(scenario, REQUESTS, 1, **options))
    start, end = sim.times["client"]
    return float(np.percentile((end - start).astype(np.float64), 99)) / 1e6


@pytest.fixture(scope="module")
def measured_p99(tmp_path_factory):
    """The p99 of a run simulated without the cause, each (scenario, options) once for the module, from
    the simulator (`simulated_p99`). The plain steady run, which four cases compare with, is also loaded
    and read back as the faulty runs are, and must give the same p99 to the bit."""
    measured: dict[str, float] = {}

    def of(scenario: str, options: dict) -> float:
        key = repr((scenario, sorted(options.items())))
        if key not in measured:
            measured[key] = simulated_p99(scenario, **options)
            if (scenario, options) == ("steady", {}):
                read_back = p99(frame(tmp_path_factory.mktemp("fixed"), "fixed", scenario, **options))
                assert read_back == measured[key], (read_back, measured[key])
        return measured[key]

    return of


@pytest.mark.parametrize(
    "cause,with_opts,without,without_opts,lever",
    CASES,
    ids=[f"{c[0]}-{c[4]}-{i}" for i, c in enumerate(CASES)],
)
def test_lever_predicts_the_run_without_its_cause(
    faulty_frame, measured_p99, cause, with_opts, without, without_opts, lever
):
    faulty = faulty_frame(cause, **with_opts)
    guess, before = predicted(faulty, lever)
    truth = measured_p99(without, without_opts)
    assert before > 1.1 * truth  # the cause is material in the faulty run
    assert guess == pytest.approx(truth, rel=0.15), (guess, truth, before)
    assert abs(guess - truth) < 0.5 * (before - truth), (guess, truth, before)  # not the run as it was


def test_forward_speedup_measured_in_another_run(tmp_path):
    fp32 = frame(tmp_path, "fp32", "steady", hardware="cpu-fp32", rps=400)
    int8 = frame(tmp_path, "int8", "steady", hardware="cpu-int8", rps=400)
    k = measured_speedup(fp32, int8)
    assert 0.45 < k < 0.6  # int8's batch of ~3: (6 + 1.2 x 3) / (10 + 2.5 x 3) = 0.55
    findings = [fd.to_dict(with_chart=True) for fd in diagnose_frame(fp32).findings]
    result = evaluate(fp32, findings, speedup=k, speedup_from="int8")
    guess = next(o for o in result.outcomes if o.key == "forward_as:int8").p99_ms
    assert guess == pytest.approx(p99(int8), rel=0.15)


def test_lever_timings_give_the_outcomes_requests_and_stage_times(faulty_frame):
    from tailscope.analysis.whatif.engine import lever_timings

    faulty = faulty_frame("gc-pressure")
    findings = findings_of(faulty)
    outcome = next(o for o in evaluate(faulty, findings).outcomes if o.key == "no_gc_stalls")
    latency, dur = lever_timings(faulty, findings, "no_gc_stalls")
    assert len(latency) == len(faulty.requests) and len(dur) == len(faulty)
    assert np.percentile(latency, 99) / 1e6 == pytest.approx(outcome.p99_ms, abs=1e-3)
    assert dur.sum() < 0.9 * faulty.dur.sum()  # the pauses gone from the spans they stretched
    assert lever_timings(faulty, findings, "no_such_lever") is None


def test_prewarmed_forwards_cost_a_warm_batch_of_their_own_size(faulty_frame):
    from tailscope.analysis.whatif.engine import inputs, plan

    cold = faulty_frame("cold-start")
    findings = findings_of(cold)
    x = inputs(cold, findings)
    lever = next(lv for lv in plan(x) if lv.key == "prewarmed")
    s = x.served
    warm = int(lever.params["warmup_requests"])
    early = cold.requests.index_on_instance[s.request] < warm
    big = s.size >= 6  # the backlog behind the cold start leaves in large batches
    assert (early & big).any()
    edited = lever.edit.dur[s.forward[early & big]]
    warm_big = cold.dur[s.forward[~early & big]]
    warm_all = cold.dur[s.forward[~early]]
    assert np.median(warm_big) > 1.5 * np.median(warm_all)  # the sizes cost differently
    # drawn from the warm batches of the same sizes, not from every warm forward pass
    assert np.median(edited) == pytest.approx(np.median(warm_big), rel=0.15)
