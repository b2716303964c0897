"""The held-out blind family `vision-moderation` (reference_pipeline/simulate/vision_moderation*.py): it
writes each of its formats, loads through the real loader, its truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way Go's GC pacer, the CFS
quota, Triton's batcher and a cold replica, PgBouncer, the payload, the object store or TCP would
produce it (and a steady run of the same seed does not). No diagnosis is run here (the family was held
out until its honest scores)."""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from reference_pipeline.simulate import blind
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from reference_pipeline.simulate.vision_moderation import SCENARIOS, generate, setup
from reference_pipeline.simulate.vision_moderation_spans import instance_label, names
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_vision_moderation.py::test_each_format_loads_and_the_truth_names_what_the_run_has[0-gc-assist+triton-cold]",
    "tests/test_simulate_blind_vision_moderation.py::test_each_format_loads_and_the_truth_names_what_the_run_has[1-pgbouncer-exhaustion]",
    "tests/test_simulate_blind_vision_moderation.py::test_each_format_loads_and_the_truth_names_what_the_run_has[2-triton-cold]",
)

MS = 1e6
FAMILY = "vision-moderation"
N = 1200


@cache
def table(scenario: str, seed: int, requests: int = N) -> list[dict]:
    """The run's spans straight from the model's table (no file): for the timing checks."""
    s = setup(seed)
    tb = generate(scenario, requests, seed)
    labels = [instance_label(s, attrs, ip, port) for attrs, (_, ip, port) in zip(tb.resources, tb.endpoints,
                                                                                  strict=True)]
    out = []
    for i, (trace, parent, name, kind, res, _scope, start, end, attrs, status, _m, events, _p) in enumerate(
            tb.rows):
        out.append({"trace": trace, "id": i, "parent": parent, "name": name, "kind": kind, "start": start,
                    "end": end, "duration": end - start, "attrs": attrs, "status": status,
                    "events": [(ts + DEFAULT_START_NS, ev, ea) for ts, ev, ea in events],
                    "service": tb.resources[res]["service.name"], "instance": labels[res]})
    return out


def named(spans: list[dict], name: str) -> list[dict]:
    return [x for x in spans if x["name"].lower() == name.lower()]


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def latencies(spans: list[dict]) -> list[int]:
    return [x["duration"] for x in spans if x["parent"] in (-1, "")]


def by_id(spans: list[dict]) -> dict:
    return {x["id"]: x for x in spans}


def test_registered_open_with_steady_eight_causes_and_four_pairs() -> None:
    assert blind.MODULES[FAMILY] == "vision_moderation" and FAMILY not in blind.UNTOUCHED  # open: scored
    assert FAMILY in blind.available() and blind.scenarios(FAMILY) == SCENARIOS
    assert SCENARIOS[0] == "steady" and blind.truth(FAMILY, "steady", 0) == []
    single = [s for s in SCENARIOS[1:] if "+" not in s]
    assert len({blind.truth(FAMILY, s, 0)[0]["pattern"] for s in single}) == len(single) == 8
    assert sum(len(blind.truth(FAMILY, s, 1)) == 2 for s in SCENARIOS) == 4
    with pytest.raises(ValueError, match="unknown vision-moderation scenario 'gc-storm'"):
        blind.truth(FAMILY, "gc-storm", 0)


def _instance(resource: dict) -> str:
    if "net.host.ip" in resource:
        return f"{resource['net.host.ip']}:{resource['net.host.port']}"
    return resource.get("service.instance.id") or resource["hostname"]


@pytest.mark.parametrize(("seed", "scenario"), [(0, "gc-assist+triton-cold"), (1, "pgbouncer-exhaustion"),
                                                (2, "triton-cold")])
def test_each_format_loads_and_the_truth_names_what_the_run_has(
    tmp_path: Path, seed: int, scenario: str
) -> None:
    spans, summary = load_run(tmp_path, FAMILY, scenario, 200, seed, instance=_instance, lists=True)
    s = setup(seed)
    assert summary["format"] == s["fmt"] and summary["requests"] == 200
    traced = s["triton_spans"] != "none"
    services = {"moderation-gateway", "triton-inference-server"} if traced else {"moderation-gateway"}
    assert {x["service"] for x in spans} == services
    roots = [x for x in spans if not x["parent"]]
    assert len(roots) == 200 and {x["name"].lower() for x in roots} == {names(s)["root"].lower()}
    for cause in summary["truth"]:
        assert named(spans, cause["span"]), cause
        assert set(cause["instances"]) <= {x["instance"] for x in spans if x["service"] == cause["service"]}
    # the audit event: fire and forget, a PRODUCER span under the root that can end after it
    ids = {x["id"]: x for x in spans}
    published = [x for x in spans if x["kind"] == "Producer"]
    assert len(published) == 200 and sum(x["end"] > ids[x["parent"]]["end"] for x in published) > 20
    layout = {x["name"].lower() for x in spans if x["service"] == "triton-inference-server"}
    assert layout == {"full": {"moderation_ensemble", "vit_embedder", "safety_head", "queue", "compute_input",
                               "compute_infer", "compute_output"},
                      "compute": {"moderation_ensemble", "vit_embedder", "safety_head", "compute"},
                      "none": set()}[s["triton_spans"]]
    assert bool([e for x in spans for e in x["events"] if e["Name"] == "go.gc"]) == s["gc_events"]
    size = "http.response.body.size" if s["semconv"] == "new" else "http.response_content_length"
    assert all(int(x["attrs"][size]) > 0 for x in named(spans, "S3.GetObject"))


def _marks(spans: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Per instance, the concurrent marks the go.gc events report (each cycle once)."""
    seen: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for x in spans:
        for ts, ev, ea in x["events"]:
            if ev == "go.gc":
                end = ts - ea["go.gc.stw.mark_termination_us"] * 1000
                seen[x["instance"]][ea["go.gc.cycle"]] = (end - ea["go.gc.mark_ms"] * MS, end)
    return {k: sorted(v.values()) for k, v in seen.items()}


def _per_mp(span: dict) -> float:
    return span["duration"] / (span["attrs"]["image.width"] * span["attrs"]["image.height"] / 1e6)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_allocation_spike_makes_decodes_assist_during_marks_with_short_stop_the_world() -> None:
    spans, steady = table("gc-assist", 0), table("steady", 0)
    stw = [ea[k] for x in spans for _, ev, ea in x["events"] if ev == "go.gc"
           for k in ("go.gc.stw.sweep_termination_us", "go.gc.stw.mark_termination_us")]
    assert max(stw) < 1000  # the pauses stay sub-millisecond: the time goes to the assists
    marks = _marks(spans)
    inside, outside = [], []
    for x in named(spans, "image.Decode"):
        mine = marks.get(x["instance"], [])
        (inside if any(a <= x["start"] and x["end"] <= b for a, b in mine) else outside).append(_per_mp(x))
    assert len(inside) > 100 and np.median(inside) > 2.0 * np.median(outside)
    busy = sum(b - a for m in marks.values() for a, b in m) / len(marks)
    quiet = sum(b - a for m in _marks(steady).values() for a, b in m) / len(_marks(steady))
    assert busy > 8 * quiet  # marks back to back in the spike
    assert p(latencies(spans), 99) > 1.4 * p(latencies(steady), 99)
    assert p(latencies(table("gc-assist", 1)), 99) > 1.4 * p(latencies(table("steady", 1)), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_throttled_pods_stall_until_their_period_boundaries() -> None:
    spans, steady = table("cpu-throttle", 2), table("steady", 2)
    work = named(spans, "image.Decode") + named(spans, "image.Resize")
    stretched, aligned = 0, 0
    for pod in {x["instance"] for x in work}:
        ends = [x["end"] % 100_000_000 for x in work if x["instance"] == pod and _per_mp(x) > 10 * MS]
        bins = np.bincount(np.asarray(ends, dtype=int) // 10_000_000, minlength=10)
        stretched += len(ends)
        aligned += max(bins[k] + bins[(k + 1) % 10] for k in range(10))  # resumed at the pod's boundary
    assert stretched > 30 and aligned > 0.8 * stretched
    assert sum(_per_mp(x) > 10 * MS for x in named(steady, "image.Decode")) < 0.01 * len(work)
    reported = table("cpu-throttle", 0)
    marks = [ea["go.gc.mark_ms"] for x in reported for _, ev, ea in x["events"] if ev == "go.gc"]
    assert marks and max(marks) < 60  # seed 0 reports its GC: as calm as in a steady run
    assert p(latencies(spans), 99) > 1.5 * p(latencies(steady), 99)


def _surge(spans: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    roots = sorted((x for x in spans if x["parent"] == -1), key=lambda x: x["start"])
    t = np.array([x["start"] for x in roots], dtype=float)
    return t, np.array([x["trace"] for x in roots])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_surge_past_the_batchers_capacity_grows_the_queue_span() -> None:
    spans, steady = table("triton-queueing", 0), table("steady", 0)
    ids = by_id(spans)
    queue = {x["trace"]: x["duration"] for x in named(spans, "queue")
             if ids[x["parent"]]["name"] == "vit_embedder"}
    t, traces = _surge(spans)
    rate = np.bincount(((t - t[0]) // (250 * MS)).astype(int))
    busy = np.flatnonzero(rate > 1.8 * np.median(rate))
    first, last = busy.min(), busy.max()
    slot = ((t - t[0]) // (250 * MS)).astype(int)
    early = [queue[k] for k, s in zip(traces, slot, strict=True) if s == first]
    late = [queue[k] for k, s in zip(traces, slot, strict=True) if s == last]
    assert np.median(late) > 3 * np.median(early) and np.median(late) > 100 * MS  # grows while it lasts
    assert p([x["duration"] for x in named(steady, "queue")], 99) < 20 * MS
    infer = [x["duration"] for x in named(spans, "compute_infer")]
    assert max(infer) < 40 * MS  # batches stay at the preferred 8: the GPU is not slower, the queue is
    assert p(latencies(spans), 99) > 2 * p(latencies(steady), 99)
    untraced = table("triton-queueing", 1)  # seed 1 traces no Triton: only the gateway's call grows
    calls = named(untraced, "inference.GRPCInferenceService/ModelInfer")
    assert p([x["duration"] for x in calls], 99) > 150 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_replica_added_mid_run_is_slow_for_its_first_batches() -> None:
    spans, steady = table("triton-cold", 2), table("steady", 2)
    (cause,) = blind.truth(FAMILY, "triton-cold", 2)
    (new,) = cause["instances"]
    compute = sorted(named(spans, "compute"), key=lambda x: x["start"])
    mine = [x for x in compute if x["instance"] == new]
    assert mine[0]["start"] > compute[int(len(compute) * 0.3)]["start"]  # it joined mid-run
    assert mine[0]["duration"] > 200 * MS and max(x["duration"] for x in mine[-20:]) < 40 * MS
    assert max(x["duration"] for x in compute if x["instance"] != new) < 40 * MS
    assert max(x["duration"] for x in named(steady, "compute")) < 40 * MS
    assert p(latencies(spans), 99) > 2 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_slow_commits_hold_pgbouncer_connections_and_the_next_transactions_wait_at_begin() -> None:
    spans, steady = table("pgbouncer-exhaustion", 1), table("steady", 1)
    kids: dict = defaultdict(dict)
    for x in spans:
        if x["name"] in ("BEGIN", "COMMIT", "INSERT moderation.verdicts"):
            kids[x["parent"]][x["name"]] = x
    begin = [k["BEGIN"]["duration"] for k in kids.values()]
    commit = [k["COMMIT"]["duration"] for k in kids.values()]
    assert p(begin, 95) > 50 * MS and p(commit, 75) > 40 * MS
    assert p([x["duration"] for x in named(steady, "BEGIN")], 99) < 5 * MS
    insert = [k["INSERT moderation.verdicts"]["duration"] for k in kids.values()]
    assert p(insert, 50) < 2 * MS  # the statements themselves are no slower
    # never more transactions in flight (a server connection each) than PgBouncer's pool
    edges = sorted([(k["BEGIN"]["end"] - 0.2 * MS, 1) for k in kids.values()]
                   + [(k["COMMIT"]["end"] - 0.05 * MS, -1) for k in kids.values()])
    assert max(np.cumsum([d for _, d in edges])) <= setup(1)["pool"] + 2
    assert p(latencies(spans), 99) > 3 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_decode_and_transfer_grow_with_the_new_clients_originals() -> None:
    spans, steady = table("large-images", 0), table("steady", 0)
    decode = named(spans, "image.Decode")
    pixels = np.array([x["attrs"]["image.width"] * x["attrs"]["image.height"] for x in decode])
    took = np.array([x["duration"] for x in decode])
    assert (pixels > 10e6).mean() > 0.2 and np.corrcoef(pixels, took)[0, 1] > 0.85
    ids = by_id(spans)
    fetch = {x["id"]: x for x in named(spans, "blob.Fetch")}
    own = [(ids[x["parent"]]["attrs"]["blob.size_bytes"], ids[x["parent"]]["end"] - x["end"])
           for x in named(spans, "S3.GetObject") if x["parent"] in fetch]
    size, body = np.array(own, dtype=float).T
    assert np.corrcoef(size, body)[0, 1] > 0.8  # the body read after the first byte grows with the size
    assert p(latencies(spans), 99) > 1.8 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_one_regions_bucket_has_the_first_byte_tail() -> None:
    spans, steady = table("s3-region-tail", 1), table("steady", 1)

    def by_region(run: list[dict]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = defaultdict(list)
        for x in named(run, "S3.GetObject"):
            out[x["attrs"].get("aws.region") or x["attrs"]["cloud.region"]].append(x["duration"])
        return out

    slow, calm = by_region(spans), by_region(steady)
    others = max(p(slow[r], 95) for r in ("us-east-1", "ca-central-1"))
    assert p(slow["us-east-2"], 95) > max(100 * MS, 3 * others)
    assert max(p(v, 95) for v in calm.values()) < 60 * MS
    assert p(latencies(spans), 99) > 2 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_lossy_node_opens_rto_gaps_between_client_and_server() -> None:
    spans, steady = table("node-packet-loss", 0), table("steady", 0)
    (cause,) = blind.truth(FAMILY, "node-packet-loss", 0)

    def gaps(run: list[dict]) -> dict[str, list[float]]:
        ids = by_id(run)
        out: dict[str, list[float]] = defaultdict(list)
        for x in named(run, "moderation_ensemble"):
            call = ids[x["parent"]]
            out[call["instance"]].append(max(x["start"] - call["start"], call["end"] - x["end"]))
        return out

    lossy = gaps(spans)
    bad = np.array(lossy.pop(cause["instances"][0]))
    assert 0.05 < (bad > 190 * MS).mean() < 0.4
    assert sum(g > 20 * MS for v in lossy.values() for g in v) <= 2  # a rare retransmission elsewhere
    assert sum(g > 190 * MS for v in gaps(steady).values() for g in v) <= 2
    assert p(latencies(spans), 99) > 2 * p(latencies(steady), 99)


def _marked(scenario: str, spans: list[dict], part: str) -> dict[int, bool]:
    """Per trace: whether `part` of the pair touched it."""
    out: dict[int, bool] = {}
    ids = by_id(spans)
    if part == "s3-region-tail":
        return {x["trace"]: x["attrs"]["cloud.region"] == "us-east-2" and x["duration"] > 80 * MS
                for x in named(spans, "S3.GetObject")}
    if part == "large-images":
        return {x["trace"]: x["attrs"]["image.width"] > 3000 for x in named(spans, "image.Decode")}
    if part == "node-packet-loss":
        (where,) = blind.truth(FAMILY, scenario, 0)[1]["instances"]
        return {x["trace"]: x["instance"] == where for x in spans if x["parent"] == -1}
    if part == "pgbouncer-exhaustion":
        return {x["trace"]: x["duration"] > 20 * MS for x in named(spans, "BEGIN")}
    if part in ("triton-queueing", "cpu-throttle"):
        key = "queue" if part == "triton-queueing" else "image.Decode"
        for x in named(spans, key):
            slow = x["duration"] > 30 * MS if key == "queue" else _per_mp(x) > 20 * MS
            out[x["trace"]] = out.get(x["trace"], False) or slow
        return out
    if part == "triton-cold":
        (where,) = blind.truth(FAMILY, scenario, 0)[1]["instances"]
        return {ids[x["parent"]]["trace"]: x["instance"] == where
                for x in named(spans, "moderation_ensemble")}
    marks = _marks(spans)  # gc-assist: the decode ran inside a mark
    return {x["trace"]: any(a <= x["start"] < b for a, b in marks.get(x["instance"], []))
            for x in named(spans, "image.Decode")}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if "+" in s])
def test_both_causes_of_a_pair_are_in_the_tail(scenario: str) -> None:
    """Each cause of a pair is over-represented among the slowest 2 % of requests; a cause that
    touches most requests (the allocation spike) instead moves the median and the tail beyond the other
    cause alone."""
    spans, steady = table(scenario, 0), table("steady", 0)
    roots = {x["trace"]: x["duration"] for x in spans if x["parent"] == -1}
    slowest = sorted(roots, key=roots.get)[-len(roots) // 50:]
    assert p(list(roots.values()), 99) > 2 * p(latencies(steady), 99)
    parts = scenario.split("+")
    for part in parts:
        marked = _marked(scenario, spans, part)
        base = np.mean(list(marked.values()))
        if base > 0.5:
            (other,) = set(parts) - {part}
            alone = latencies(table(other, 0))
            assert p(list(roots.values()), 50) > 1.3 * p(alone, 50), part
            assert p(list(roots.values()), 99) > p(alone, 99) + 40 * MS, part
            continue
        share = np.mean([marked.get(t, False) for t in slowest])
        assert share > max(0.2, 1.3 * base), (part, share)
