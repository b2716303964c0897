"""The untouched blind family `ads-auction` (reference_pipeline/simulate/ads_auction*.py): each format
loads through the real loader and its truth names spans, services and instances the run has; each
planted mechanism shows in the spans the way the Go runtime, the cgroup, the network, the cache, the
batcher or the shards would produce it, and a steady run of the same seed does not. The mechanism
tests read the family's span table (what the writers render; the loader test shows it arrives
whole) to keep the file fast. Kept apart from test_simulate_blind.py: whoever works on the diagnosis
is not to read this family."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reference_pipeline.simulate import blind
from reference_pipeline.simulate.ads_auction import DEADLINE_MS, SCENARIOS, generate, setup
from reference_pipeline.simulate.config import DEFAULT_START_NS
from reference_pipeline.simulate.trace_table import TraceTable
from tailscope.vocabulary import PATTERNS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_ads_auction.py::test_each_format_loads_and_the_truth_names_what_the_run_has[0]",
    "tests/test_simulate_blind_ads_auction.py::test_each_format_loads_and_the_truth_names_what_the_run_has[1]",
    "tests/test_simulate_blind_ads_auction.py::test_each_format_loads_and_the_truth_names_what_the_run_has[2]",
)

MS = 1e6
FAMILY = "ads-auction"


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def label(table: TraceTable, res: int, fmt: str) -> str:
    """The truth's instance label: the pod's name, or a Zipkin endpoint's ip:port."""
    _service, ip, port = table.endpoints[res]
    r = table.resources[res]
    return f"{ip}:{port}" if fmt == "zipkin" else r.get("k8s.pod.name") or r.get("host.name") or r["hostname"]


@cache
def run(scenario: str, seed: int, requests: int = 600) -> list[dict[str, Any]]:
    """The run's spans as the family's table holds them (times in ns)."""
    table = generate(scenario, requests, seed)
    fmt = setup(seed)["fmt"]
    out = []
    for i, row in enumerate(table.rows):
        trace, parent, name, kind, res, _scope, start, end, attrs, status, _msg, events, _peer = row
        out.append({"i": i, "trace": trace, "parent": parent, "name": name, "kind": kind, "start": start,
                    "end": end, "duration": end - start, "attrs": attrs, "status": status, "events": events,
                    "service": table.endpoints[res][0], "instance": label(table, res, fmt)})
    return out


def named(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"] == name and (kind is None or s["kind"] == kind)]


def roots(spans: list[dict]) -> list[dict]:
    return [s for s in spans if s["parent"] == -1]


def load(tmp: Path, scenario: str, seed: int, requests: int) -> tuple[list[dict], dict]:
    spans, summary = load_run(tmp, FAMILY, scenario, requests, seed, instance=_instance, lists=True)
    assert summary["format"] == setup(seed)["fmt"]
    return spans, summary


def _instance(r: dict) -> str:
    if "net.host.ip" in r:
        return f"{r['net.host.ip']}:{r['net.host.port']}"
    return r.get("k8s.pod.name") or r.get("host.name") or r.get("hostname")


def test_registered_open_with_single_and_two_cause_scenarios() -> None:
    assert blind.MODULES[FAMILY] == "ads_auction" and FAMILY not in blind.UNTOUCHED  # open since its scores
    assert FAMILY in blind.available() and blind.scenarios(FAMILY) == SCENARIOS
    singles = [s for s in SCENARIOS if "+" not in s and s != "steady"]
    pairs = [s for s in SCENARIOS if "+" in s]
    assert SCENARIOS[0] == "steady" and len(singles) >= 6 and len(pairs) >= 3
    assert all(len(blind.truth(FAMILY, s, 0)) == 2 and set(s.split("+")) <= set(singles) for s in pairs)
    patterns = {blind.truth(FAMILY, s, 0)[0]["pattern"] for s in singles}
    assert len(patterns) == len(singles) and patterns <= set(PATTERNS)
    with pytest.raises(ValueError, match="unknown ads-auction scenario 'gc-storm'"):
        blind.truth(FAMILY, "gc-storm", 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_format_loads_and_the_truth_names_what_the_run_has(tmp_path: Path, seed: int) -> None:
    s = setup(seed)
    spans, summary = load(tmp_path, "gc-assist", seed, 150)
    assert summary["format"] == s["fmt"] and summary["truth"] == blind.truth(FAMILY, "gc-assist", seed)
    services = {x["service"] for x in spans}
    model = "ctr-torchserve" if s["server"] == "torchserve" else "ctr-tfserving"
    assert services == {"ad-auction", "ad-index", model} | ({"ad-auction.ads"} if s["sidecar"] else set())
    names = {x["name"].lower() for x in spans}
    for scenario in SCENARIOS:
        for cause in blind.truth(FAMILY, scenario, seed):
            assert cause["span"].lower() in names, cause
            where = {x["instance"] for x in spans if x["service"] == cause["service"]}
            assert cause["instances"] and set(cause["instances"]) <= where, cause
            assert {cause["pattern"], *cause["accept"], *cause["side"]} <= set(PATTERNS)
    # GC cycles are events on seeds 0, 1 (none on the Zipkin seed): what the table holds arrives
    gc = [e for x in spans for e in x["events"] if e.get("Name") == "go.runtime.gc"]
    assert len(gc) == sum(len(x["events"]) for x in run("gc-assist", seed, 150))
    assert all(e["Attributes"]["go.gc.mark_ms"] > 0 for e in gc)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_straggler_pod_is_slow_and_its_shard_holds_the_requests_back() -> None:
    slow, steady = run("straggler-shard", 1), run("steady", 1)
    (pod,) = blind.truth(FAMILY, "straggler-shard", 1)[0]["instances"]
    for spans, ratio in ((slow, 4.0), (steady, 0.0)):
        scans = named(spans, "scan_postings")
        mine = np.median([x["duration"] for x in scans if x["instance"] == pod])
        others = np.median([x["duration"] for x in scans if x["instance"] != pod])
        assert (mine > ratio * others) if ratio else (mine < 1.5 * others)
    assert p([x["duration"] for x in roots(slow)], 99) > 1.3 * p([x["duration"] for x in roots(steady)], 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gc_marks_stretch_the_cpu_spans_and_are_reported_on_seed_0_only() -> None:
    gc, steady = run("gc-assist", 0, 1000), run("steady", 0)
    marks = [e[2]["go.gc.mark_ms"] for x in gc for e in x["events"]]
    quiet = [e[2]["go.gc.mark_ms"] for x in steady for e in x["events"]]
    assert max(marks) > 200 and max(quiet, default=0.0) < 100
    for name in ("run_auction", "parse_bid_request"):
        slow, base = named(gc, name), named(steady, name)
        assert p([x["duration"] for x in slow], 99) > 3 * p([x["duration"] for x in base], 99)
    # the reported mark's window on its pod: CPU spans that ran wholly inside it ran at 1/8 speed
    windows = {(x["instance"],
                e[0] + DEFAULT_START_NS - (e[2]["go.gc.mark_ms"] + e[2]["go.gc.pause_ms"]) * MS,
                e[0] + DEFAULT_START_NS) for x in gc for e in x["events"] if e[2]["go.gc.mark_ms"] > 200}
    work = named(gc, "run_auction")
    inside = [x["duration"] for x in work
              if any(x["instance"] == pod and a <= x["start"] and x["end"] <= b for pod, a, b in windows)]
    assert len(inside) > 5 and np.median(inside) > 4 * np.median([x["duration"] for x in work])
    assert not any(x["events"] for x in run("gc-assist", 2, 200))  # Zipkin seed: no GC reporting


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_cold_cache_sends_budget_reads_to_the_primary_and_refills() -> None:
    spans = run("budget-cache-cold", 0, 1000)
    budget = sorted(named(spans, "budget.lookup"), key=lambda x: x["start"])
    missed = np.array([x["attrs"]["budget.cache.misses"] > 0 for x in budget])
    share = np.array([x["attrs"]["budget.cache.misses"] / x["attrs"]["budget.advertisers"] for x in budget])
    flush = int(np.argmax(share > 0.9))
    assert 0.2 * len(budget) < flush < 0.4 * len(budget)  # the flush at 30 % of the run
    assert missed[: flush - 20].mean() < 0.5 and share[: flush - 20].mean() < 0.02
    assert share[flush : flush + 100].mean() > 0.3  # then refilled, popular advertisers first
    assert share[-100:].mean() < 0.6 * share[flush : flush + 100].mean()
    primary = named(spans, "aerospike.batch_get")
    assert len(primary) == missed.sum() and len(named(spans, "pipeline")) == missed.sum()
    records = [x["attrs"]["db.aerospike.records"] for x in primary]
    assert np.corrcoef(records, [x["duration"] for x in primary])[0, 1] > 0.6
    duration = np.array([x["duration"] for x in budget])
    assert np.median(duration[flush : flush + 100]) > 10 * np.median(duration[: flush - 20])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("seed", [0, 1])  # TorchServe (the wait is the gap before `inference`), TF Serving
def test_the_batcher_queue_grows_in_the_burst_and_the_batches_fill(seed: int) -> None:
    waits, runs = {}, {}
    for scenario in ("ctr-batcher-saturation", "steady"):
        spans = run(scenario, seed, 600 if scenario == "steady" else 1000)
        if seed == 0:
            parents = {x["i"]: x for x in named(spans, "POST /predictions/ctr_dcn", "Server")}
            work = named(spans, "inference")
            waits[scenario] = [w["start"] - parents[w["parent"]]["start"] for w in work]
        else:
            work = named(spans, "session_run")
            waits[scenario] = [x["duration"] for x in named(spans, "batching_queue")]
        size = "ts.batch_size" if seed == 0 else "tf.batch_size"
        runs[scenario] = ([x["duration"] for x in work], max(x["attrs"][size] for x in work))
    assert p(waits["ctr-batcher-saturation"], 99) > 40 * MS > 25 * MS > p(waits["steady"], 99)
    assert p(runs["ctr-batcher-saturation"][0], 50) < 3 * p(runs["steady"][0], 50)
    assert runs["ctr-batcher-saturation"][1] > runs["steady"][1]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_jitter_sits_between_the_flaky_pods_calls_and_the_shards() -> None:
    spans = run("zone-jitter", 2)  # Zipkin: instances are ip:port
    flaky = set(blind.truth(FAMILY, "zone-jitter", 2)[0]["instances"])
    by_parent = {x["parent"]: x for x in named(spans, "adindex.v1.CandidateIndex/Retrieve", "Server")}
    gaps: dict[bool, list[float]] = {True: [], False: []}
    cut: dict[bool, list[bool]] = {True: [], False: []}
    for call in named(spans, "adindex.v1.CandidateIndex/Retrieve", "Client"):
        flaky_pod = call["instance"] in flaky
        cut[flaky_pod].append(call["status"] == "Error")
        if call["status"] != "Error":
            gaps[flaky_pod].append(call["duration"] - by_parent[call["i"]]["duration"])
    assert p(gaps[False], 99.9) < 2.5 * MS < p(gaps[True], 50)
    # a retransmission (>= 200 ms) outlasts the 50 ms deadline: those calls are cut and retried
    assert np.mean(cut[True]) > 0.005 > 0.0005 > np.mean(cut[False])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_throttled_pods_resume_on_their_period_boundaries() -> None:
    """A shard's reply that reaches a throttled pod is read when the pod's period ends: the CLIENT
    spans that outlast their SERVER span by more than the network's ms end on the pod's boundaries."""
    spans, steady = run("cpu-throttling", 0, 1000), run("steady", 0)
    for run_spans, throttled in ((spans, True), (steady, False)):
        servers = {x["parent"]: x for x in named(run_spans, "adindex.v1.CandidateIndex/Retrieve", "Server")}
        calls = named(run_spans, "adindex.v1.CandidateIndex/Retrieve", "Client")
        late = [x for x in calls if x["duration"] - servers[x["i"]]["duration"] > 5 * MS]
        if not throttled:
            assert len(late) < 0.001 * len(calls)
            continue
        for pod in {x["instance"] for x in calls}:
            ends = [x["end"] % (100 * MS) for x in late if x["instance"] == pod]
            assert len(ends) > 8
            ends_ms = np.asarray(ends) / MS  # distances on the 100 ms circle
            near = np.abs((ends_ms[:, None] - ends_ms[None, :] + 50.0) % 100.0 - 50.0) < 2.0
            assert near.sum(axis=1).max() > 0.6 * len(ends)
    assert max((e[2]["go.gc.mark_ms"] for x in spans for e in x["events"]), default=0) < 100  # no GC storm


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_encoding_grows_with_the_response_and_feed_requests_reach_megabytes() -> None:
    spans, steady = run("many-slots", 0), run("steady", 0)
    encode = named(spans, "encode_bid_response")
    size = [x["attrs"]["openrtb.response.bytes"] for x in encode]
    assert max(size) > 500_000 and np.corrcoef(size, [x["duration"] for x in encode])[0, 1] > 0.95
    assert p([x["duration"] for x in encode], 99) > 10 * p(
        [x["duration"] for x in named(steady, "encode_bid_response")], 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_deadline_cuts_an_attempt_and_the_other_replica_is_called() -> None:
    for scenario, requests in (("shard-deadline-retry", 1000), ("many-slots+shard-deadline-retry", 600)):
        spans = run(scenario, 1, requests)
        calls = named(spans, "adindex.v1.CandidateIndex/Retrieve", "Client")
        failed = [x for x in calls if x["status"] == "Error"]
        assert len(failed) > 10
        assert all(DEADLINE_MS * MS <= x["duration"] < (DEADLINE_MS + 3) * MS for x in failed)
        assert all(x["attrs"]["rpc.grpc.status_code"] == 4 for x in failed)
        servers = {x["parent"]: x for x in named(spans, "adindex.v1.CandidateIndex/Retrieve", "Server")}
        retried = 0
        for f in failed:
            # the shard ran to its end, whatever the client did
            assert servers[f["i"]]["end"] > f["start"] + (DEADLINE_MS - 1) * MS
            shard = f["attrs"]["adindex.shard"]
            retried += any(c["trace"] == f["trace"] and c["attrs"]["adindex.shard"] == shard
                           and c["start"] > f["end"] for c in calls)
        assert retried >= 0.9 * len(failed)
    assert sum(x["status"] == "Error" for x in run("steady", 1)) < 3
