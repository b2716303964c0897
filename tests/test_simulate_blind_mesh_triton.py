"""The held-out blind family `mesh-triton` (reference_pipeline/simulate/mesh_triton*.py): it writes each of
its formats, loads through the real loader, its truth names spans, services and instances the run has,
and each planted mechanism shows in the timings the way Triton's dynamic batcher, a Redis Cluster
reshard, a cold GPU pod, mTLS handshakes on every connection, Envoy's per-try timeout and retries, a CFS
quota, a growing candidate list or a noisy neighbour would produce it (and a steady run of the same
seed does not). No diagnosis is run here (the family is held out until its honest scores)."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from reference_pipeline.simulate import blind
from reference_pipeline.simulate.mesh_triton import SCENARIOS, generate, labels, setup
from reference_pipeline.simulate.mesh_triton_physics import PERIOD, Batcher, Job, cfs_stalls, key_slot
from reference_pipeline.simulate.mesh_triton_spans import SCORE, TRITON, names
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_mesh_triton.py::test_each_format_loads_and_the_truth_names_what_the_run_has[0-triton-cold-scaleout]",
    "tests/test_simulate_blind_mesh_triton.py::test_each_format_loads_and_the_truth_names_what_the_run_has[1-noisy-neighbour]",
    "tests/test_simulate_blind_mesh_triton.py::test_each_format_loads_and_the_truth_names_what_the_run_has[2-candidate-growth+mtls-handshake-churn]",
)

MS = 1e6
FAMILY = "mesh-triton"
N = 1000


@cache
def table(scenario: str, seed: int = 0) -> list[dict]:
    """The run's spans straight from the model's table (no file): for the timing checks."""
    tb = generate(scenario, N, seed)
    out = []
    for i, (trace, parent, name, kind, res, _scope, start, end, attrs, status, _m, events, _p) in enumerate(
        tb.rows
    ):
        attrs_res = tb.resources[res]
        out.append(
            {
                "trace": trace,
                "id": i,
                "parent": parent,
                "name": name,
                "kind": kind,
                "start": start,
                "end": end,
                "duration": end - start,
                "attrs": attrs,
                "status": status,
                "events": {ev: ts + DEFAULT_START_NS for ts, ev, _ in events},
                "service": attrs_res["service.name"],
                "pod": attrs_res.get("k8s.pod.name"),
            }
        )
    return out


def named(spans: list[dict], key: str, service: str | None = None) -> list[dict]:
    name = names(setup(0))[key]
    return [x for x in spans if x["name"] == name and (service is None or x["service"] == service)]


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def latency(spans: list[dict]) -> dict[int, float]:
    return {x["trace"]: x["duration"] for x in spans if x["parent"] == -1}


def p99_ratio(scenario: str) -> float:
    return p(list(latency(table(scenario)).values()), 99) / p(list(latency(table("steady")).values()), 99)


def test_registered_held_out_with_steady_eight_causes_and_three_pairs() -> None:
    assert blind.MODULES[FAMILY] == "mesh_triton" and FAMILY not in blind.UNTOUCHED  # open since its scores
    assert FAMILY in blind.available() and blind.scenarios(FAMILY) == SCENARIOS
    assert SCENARIOS[0] == "steady" and blind.truth(FAMILY, "steady", 0) == []
    single = [s for s in SCENARIOS[1:] if "+" not in s]
    assert len(single) == 8 and all(len(blind.truth(FAMILY, s, 1)) == 1 for s in single)
    assert sum(len(blind.truth(FAMILY, s, 2)) == 2 for s in SCENARIOS) == 3
    with pytest.raises(ValueError, match="unknown mesh-triton scenario 'gc-storm'"):
        blind.truth(FAMILY, "gc-storm", 0)


def _instance(resource: dict) -> str:
    if "net.host.ip" in resource:
        return f"{resource['net.host.ip']}:{resource['net.host.port']}"
    return resource.get("k8s.pod.name") or resource["host.name"]


@pytest.mark.parametrize(
    ("seed", "scenario"),
    [(0, "triton-cold-scaleout"), (1, "noisy-neighbour"), (2, "candidate-growth+mtls-handshake-churn")],
)
def test_each_format_loads_and_the_truth_names_what_the_run_has(
    tmp_path: Path, seed: int, scenario: str
) -> None:
    spans, summary = load_run(tmp_path, FAMILY, scenario, 150, seed, instance=_instance, lists=True)
    s, n = setup(seed), names(setup(seed))
    assert summary["format"] == s["fmt"] and summary["requests"] == 150
    services = {x["service"] for x in spans}
    assert {SCORE, "policy"} <= services
    assert ("istio-ingressgateway.istio-system" in services) == s["proxies"]
    assert (TRITON in services) == (s["triton"] is not None)
    roots = [x for x in spans if not x["parent"]]
    assert len(roots) == 150 and {x["service"] for x in roots} == (
        {"istio-ingressgateway.istio-system"} if s["proxies"] else {SCORE}
    )
    for cause in summary["truth"]:
        assert [x for x in spans if x["name"] == cause["span"] and x["service"] == cause["service"]], cause
        assert set(cause["instances"]) <= {x["instance"] for x in spans if x["service"] == cause["service"]}
    models = [x for x in spans if x["name"] == n["model"]]
    if s["triton"] == "events":
        assert {e["Name"] for e in models[0]["events"]} >= {"REQUEST_START", "QUEUE_START", "COMPUTE_END"}
    if s["triton"] == "spans":
        assert [x for x in spans if x["name"] == n["compute_infer"]] and not models[0]["events"]
    peer = "server.address" if s["semconv"] == "new" else "net.peer.name"
    assert all(peer in x["attrs"] for x in spans if x["name"] == n["infer"])
    proxies = [x for x in spans if x["attrs"].get("component") == "proxy"]
    assert bool(proxies) == s["proxies"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_fills_the_batcher_queue_while_arrivals_outrun_the_gpus() -> None:
    spans, steady = table("triton-queue-burst"), table("steady")

    def waits(run: list[dict]) -> list[tuple[float, float]]:
        return [
            (x["events"]["QUEUE_START"], x["events"]["COMPUTE_START"] - x["events"]["QUEUE_START"])
            for x in named(run, "model")
        ]

    assert p([w for _, w in waits(steady)], 99) < 40 * MS  # the queue delay, or one batch ahead
    rows = sorted(waits(spans))
    starts = np.array([t for t, _ in rows])
    w = np.array([w for _, w in rows])
    assert w.max() > 100 * MS
    # the wait builds up over the burst: it peaks late in the burst, not at its first requests
    rate = np.array([np.sum(np.abs(starts - t) < 0.5e9) for t in starts])
    assert np.corrcoef(rate, w)[0, 1] > 0.4
    assert p99_ratio("triton-queue-burst") > 2


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_resharding_blocks_the_source_shard_and_redirects_moved_keys() -> None:
    spans, steady = table("redis-resharding"), table("steady")
    by_peer = defaultdict(list)
    for x in named(spans, "hmget") + named(spans, "lrange"):
        by_peer[x["attrs"]["server.address"]].append(x["duration"])
    slow = {peer for peer, d in by_peer.items() if p(d, 90) > 30 * MS}
    assert slow == {"10.52.5.22"} or slow == {"10.52.5.22", "10.52.9.26"}  # shard 2 (and the new master)
    steady_redis = named(steady, "hmget") + named(steady, "lrange")
    assert p([x["duration"] for x in steady_redis], 99) < 30 * MS
    assert not [x for x in steady_redis if x["status"] == "Error"]
    redirected = [x for x in named(table("redis-resharding", 1), "hmget") if x["status"] == "Error"]
    assert p99_ratio("redis-resharding") > 1.5
    assert redirected or [x for x in spans if x["status"] == "Error" and x["name"] in ("HMGET", "LRANGE")]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_scaled_out_triton_pod_joins_mid_run_and_its_first_batches_are_slow() -> None:
    spans = table("triton-cold-scaleout")
    (new,) = blind.truth(FAMILY, "triton-cold-scaleout", 0)[0]["instances"]
    models = named(spans, "model", TRITON)
    mine = sorted((x for x in models if x["pod"] == new), key=lambda x: x["start"])
    assert mine[0]["start"] > min(x["start"] for x in models) + 5e9
    compute = [x["events"]["COMPUTE_END"] - x["events"]["COMPUTE_START"] for x in mine]
    assert compute[0] > 500 * MS and np.median(compute[-50:]) < 60 * MS
    old = [x["events"]["COMPUTE_END"] - x["events"]["COMPUTE_START"] for x in models if x["pod"] != new]
    assert max(old) < 200 * MS
    assert p99_ratio("triton-cold-scaleout") > 3


def _handshake_gaps(run: list[dict]) -> list[float]:
    """Outbound sidecar span start -> the Triton sidecar's inbound span start."""
    out = {x["id"]: x for x in named(run, "proxy_triton", "score.ml")}
    return [x["start"] - out[x["parent"]]["start"] for x in named(run, "proxy_triton", "triton-ranker.ml")]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_every_hop_pays_an_mtls_handshake_when_connections_are_not_reused() -> None:
    steady, churn = _handshake_gaps(table("steady")), _handshake_gaps(table("mtls-handshake-churn"))
    assert np.mean(np.array(steady) > 5 * MS) < 0.02 and np.median(steady) < 1 * MS
    assert np.mean(np.array(churn) > 5 * MS) > 0.95
    assert p99_ratio("mtls-handshake-churn") > 1.25


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_tries_to_the_slow_policy_pod_are_cut_at_the_per_try_timeout_and_retried_elsewhere() -> None:
    spans, steady = table("policy-per-try-timeout"), table("steady")
    inbound = named(spans, "proxy_policy", "policy.ml")
    cut = [x for x in inbound if x["attrs"]["response_flags"] == "DC"]
    pods = [x["pod"] for x in cut]
    assert len(cut) > 0.05 * N and max(pods.count(pod) for pod in pods) > 0.95 * len(cut)  # one bad pod
    took = np.array([x["duration"] for x in cut])  # the per-try timer also ran while a reset's reconnect
    assert np.all((took > 55 * MS) & (took < 81 * MS)) and np.mean(took > 79 * MS) > 0.8  # handshook
    tries = defaultdict(list)
    for x in inbound:
        tries[x["parent"]].append(x)
    for group in tries.values():
        group.sort(key=lambda x: x["start"])
        for a, b in itertools.pairwise(group):
            assert a["attrs"]["response_flags"] == "DC" and b["start"] >= a["end"] - 1 * MS
            assert b["pod"] != a["pod"]
    handlers = {x["parent"]: x for x in named(spans, "policy")}
    assert np.mean([handlers[x["id"]]["end"] > x["end"] for x in cut]) > 0.9  # the handler runs on
    steady_cut = [x for x in named(steady, "proxy_policy", "policy.ml") if x["status"] == "Error"]
    assert len(steady_cut) < 0.01 * N
    assert p99_ratio("policy-per-try-timeout") > 1.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_low_cpu_limit_stalls_the_score_pods_until_period_boundaries() -> None:
    spans, steady = table("cfs-throttling"), table("steady")
    builds = [x for x in named(spans, "build") if x["duration"] > 10 * MS]
    assert len(builds) > 0.03 * N
    after = np.array([((x["end"] - DEFAULT_START_NS) % PERIOD) / MS for x in builds])
    assert np.mean(after < 8) > 0.8  # resumed at a boundary, then a few ms of work
    assert p([x["duration"] for x in named(steady, "build")], 99.9) < 10 * MS
    assert p99_ratio("cfs-throttling") > 1.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_work_grows_with_the_candidates_after_the_client_change() -> None:
    spans, steady = table("candidate-growth"), table("steady")
    builds = named(spans, "build")
    size = np.array([x["attrs"]["ranker.candidates"] for x in builds], dtype=float)
    took = np.array([x["duration"] for x in builds], dtype=float)
    assert np.corrcoef(np.argsort(np.argsort(size)), np.argsort(np.argsort(took)))[0, 1] > 0.8
    assert p(size, 99) > 1.8 * p([x["attrs"]["ranker.candidates"] for x in named(steady, "build")], 99)
    calls = named(spans, "infer")
    early = [x["duration"] for x in calls[: N // 5]]
    late = [x["duration"] for x in calls[-N // 5 :]]
    assert np.median(late) > 1.6 * np.median(early)
    assert p99_ratio("candidate-growth") > 1.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_noisy_neighbours_pod_is_slower_at_every_step() -> None:
    spans = table("noisy-neighbour")
    (victim,) = blind.truth(FAMILY, "noisy-neighbour", 0)[0]["instances"]
    for key in ("build", "rerank"):
        on = [x["duration"] for x in named(spans, key) if x["pod"] == victim]
        off = [x["duration"] for x in named(spans, key) if x["pod"] != victim]
        assert np.median(on) > 2.5 * np.median(off)
    assert p99_ratio("noisy-neighbour") > 1.3


def _marked(scenario: str, spans: list[dict], part: str) -> dict[int, bool]:
    """Per trace: whether `part` of the pair touched it."""
    if part == "triton-queue-burst":
        return {
            x["trace"]: x["events"]["COMPUTE_START"] - x["events"]["QUEUE_START"] > 50 * MS
            for x in named(spans, "model")
        }
    if part == "redis-resharding":
        slow = {x["trace"] for x in named(spans, "hmget") + named(spans, "lrange") if x["duration"] > 20 * MS}
        return {t: t in slow for t in latency(spans)}
    if part == "policy-per-try-timeout":
        cut = {x["trace"] for x in named(spans, "proxy_policy", "policy.ml") if x["status"] == "Error"}
        return {t: t in cut for t in latency(spans)}
    if part == "cfs-throttling":  # score's own time, or a reply it noticed late, stretched by stalls
        own: dict[int, float] = {x["trace"]: x["duration"] for x in named(spans, "root", SCORE)}
        late: dict[int, float] = defaultdict(float)
        for x in named(spans, "infer") + named(spans, "policy_call") + named(spans, "features"):
            own[x["trace"]] -= x["duration"]
        for call, sidecar in (("infer", "proxy_triton"), ("policy_call", "proxy_policy")):
            outbound = {x["parent"]: x["duration"] for x in named(spans, sidecar, "score.ml")}
            for x in named(spans, call):
                late[x["trace"]] = max(late[x["trace"]], x["duration"] - outbound[x["id"]])
        return {t: d > 12 * MS or late[t] > 8 * MS for t, d in own.items()}
    if part == "candidate-growth":
        return {x["trace"]: x["attrs"]["ranker.candidates"] > 450 for x in named(spans, "build")}
    gaps = {
        x["trace"]: g
        for x, g in zip(
            named(spans, "proxy_triton", "triton-ranker.ml"),  # mtls
            _handshake_gaps(spans),
            strict=True,
        )
    }
    return {t: g > 5 * MS for t, g in gaps.items()}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if "+" in s])
def test_both_causes_of_a_pair_are_in_the_tail(scenario: str) -> None:
    spans = table(scenario)
    roots = latency(spans)
    slowest = sorted(roots, key=roots.get)[-len(roots) // 10 :]
    assert p99_ratio(scenario) > 2
    for part in scenario.split("+"):
        marked = _marked(scenario, spans, part)
        base = np.mean(list(marked.values()))
        share = np.mean([marked.get(t, False) for t in slowest])
        assert share > max(0.15, min(0.9, 1.5 * base)) or share > 0.95, (part, share, base)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_physics_helpers_follow_their_systems() -> None:
    assert key_slot("123456789") == 0x31C3 % 16384 and key_slot("foo") == 12182
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers") == key_slot("user1000")
    # 12 ms of demand at the start of a period with an 8 ms quota: stalled from 8 ms to the boundary
    stalls = cfs_stalls([(0.0, 12 * MS)], 8.0)
    assert stalls[0] == pytest.approx((8 * MS, PERIOD), rel=1e-3) and len(stalls) == 1
    jobs = [Job(i, i * 0.1 * MS, 240, 70_000) for i in range(4)] + [Job(4, 50 * MS, 240, 70_000)]
    Batcher(random.Random(1), 1, 2.0).run(jobs)
    assert {j.batch for j in jobs[:4]} == {4} and jobs[4].batch == 1  # a preferred size goes at once
    assert jobs[4].compute_start >= 50 * MS + 2 * MS * 0.99  # alone: it waits out the queue delay
    assert list(labels(0, TRITON)[:2]) == blind.truth(FAMILY, "triton-queue-burst", 0)[0]["instances"]
