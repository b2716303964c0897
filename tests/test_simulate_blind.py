"""The blind families (reference_pipeline/simulate/blind.py): each generates, loads through the real
loader in its formats, and what its truth names was really planted: the planted mechanism's spans have
the properties the mechanism gives them, and a healthy run of the same family does not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.blind_support import load_run

MS = 1e6


def load(tmp: Path, family: str, scenario: str, requests: int, seed: int, **opts) -> tuple[list[dict], dict]:
    """The run's spans as the store holds them, after the real loader read the written file."""
    return load_run(tmp, family, scenario, requests, seed, **opts)


def instance(span: dict) -> str:
    """The instance label a blind family's truth uses: the pod name, or a Zipkin endpoint's address."""
    r = span["resource"]
    return r.get("k8s.pod.name") or r.get("host.name") or r.get("hostname") or r["net.host.ip"]


def by_name(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and (kind is None or s["kind"] == kind)]


def children(spans: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in spans:
        out.setdefault(s["parent"], []).append(s)
    return out


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


# --- edge-gateway ------------------------------------------------------------------------------------


def _gateway_parts(spans: list[dict]) -> tuple[list[dict], dict[str, dict]]:
    kids = children(spans)
    calls = by_name(spans, "ranker.v1.RankingService/Rank", "Client")
    server_of = {c["id"]: kids[c["id"]][0] for c in calls}
    return calls, server_of


def test_edge_gateway_pauses_stretch_gateway_spans_and_leave_the_ranker_alone(tmp_path: Path) -> None:
    healthy, _ = load(tmp_path, "edge-gateway", "healthy", 400, 0)  # Zipkin v2
    paused, summary = load(tmp_path, "edge-gateway", "gateway-gc", 400, 0)
    assert summary["format"] == "zipkin" and summary["truth"][0]["pattern"] == "gc_pause"
    assert {s["service"] for s in paused} == {"edge-gateway", "ranker-serving"}

    def reply_read_late(spans):  # ranker SERVER end -> gateway CLIENT end
        calls, server_of = _gateway_parts(spans)
        return [c["end"] - server_of[c["id"]]["end"] for c in calls]

    def ranker(spans):
        return [s["duration"] for s in by_name(spans, "ranker.v1.RankingService/Rank", "Server")]

    assert p(reply_read_late(healthy), 99) < 15 * MS < 60 * MS < p(reply_read_late(paused), 99.5)
    assert p(ranker(paused), 99) == pytest.approx(p(ranker(healthy), 99), rel=0.15)
    events = [s for s in by_name(paused, "post /v1/rank") if s["events"] not in ("", "[]")]
    assert events  # seed 0 reports GC (Zipkin: annotations)


def test_edge_gateway_handler_wait_grows_with_the_arrival_rate(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "edge-gateway", "worker-queue", 500, 1)  # OTLP
    assert summary["format"] == "otlp-json"
    calls, server_of = _gateway_parts(spans)
    calls.sort(key=lambda c: c["start"])
    starts = np.array([c["start"] for c in calls], dtype=float)
    wait = np.array([server_of[c["id"]]["start"] - c["start"] for c in calls], dtype=float)
    rate = 1e9 / np.maximum(np.convolve(np.diff(starts), np.ones(25) / 25, mode="same"), 1.0)
    busy = rate > np.percentile(rate, 85)
    assert np.median(wait[1:][busy]) > 10 * np.median(wait[1:][~busy])
    assert np.median(wait) < 2 * MS  # outside the bursts, the gap is the network's


def test_edge_gateway_autoscaled_pods_start_cold(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "edge-gateway", "autoscale-burst", 900, 2)
    causes = {c["pattern"]: c for c in summary["truth"]}
    assert set(causes) == {"queueing", "cold_start"}
    forward = by_name(spans, "torchscript.forward")
    for pod in causes["cold_start"]["instances"]:
        mine = sorted((s for s in forward if instance(s) == pod), key=lambda s: s["start"])
        assert len(mine) > 30
        assert mine[0]["duration"] > 5 * np.median([s["duration"] for s in mine[-20:]])
    old = [s for s in forward if instance(s) not in causes["cold_start"]["instances"]]
    assert max(s["duration"] for s in old) < 200 * MS


# --- bff-fanout --------------------------------------------------------------------------------------


def test_bff_timeouts_end_at_the_deadline_in_error_and_retry_the_same_peer(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "bff-fanout", "timeout-retry", 800, 1)
    assert [c["pattern"] for c in summary["truth"]] == ["timeout_retry"]
    kids = children(spans)
    failed = [s for s in spans if s["kind"] == "Client" and s["status"] == "Error"]
    assert len(failed) >= 10
    for span in failed:
        assert 120 * MS <= span["duration"] < 128 * MS  # cut at the deadline, when the timer ran
        assert span["attrs"]["error.type"] == "ETIMEDOUT"
        abandoned = kids[span["id"]][0]
        assert abandoned["end"] > span["end"]  # the server did not know the client gave up
        if "http.request.resend_count" in span["attrs"]:
            continue  # a retry that timed out too: the client gives up
        again = [
            s
            for s in kids[span["parent"]]
            if s["kind"] == "Client"
            and s["start"] >= span["end"]
            and s["attrs"]["server.address"] == span["attrs"]["server.address"]
        ]
        assert again and again[0]["attrs"]["http.request.resend_count"] == "1"
    healthy, _ = load(tmp_path, "bff-fanout", "healthy", 600, 1)
    assert not [s for s in healthy if s["status"] == "Error"]


def test_bff_payload_time_grows_with_the_response_size(tmp_path: Path) -> None:
    spans, _ = load(tmp_path, "bff-fanout", "large-payload", 500, 2)
    recs = [s for s in spans if s["kind"] == "Client" and s["attrs"]["server.address"] == "recs-model"]
    size = np.array([s["attrs"]["http.response.body.size"] for s in recs], dtype=float)
    assert size.max() > 50 * np.median(size) / 10 and size.max() > 2e6
    mapping = by_name(spans, "mapRecommendations")
    count = np.array([s["attrs"]["app.recs.count"] for s in mapping], dtype=float)
    rank = np.corrcoef(
        np.argsort(np.argsort(count)), np.argsort(np.argsort([s["duration"] for s in mapping]))
    )
    assert rank[0, 1] > 0.8
    assert np.corrcoef(size, [s["duration"] for s in recs])[0, 1] > 0.8


def test_bff_gc_stalls_every_callback_of_the_pod_and_is_reported_on_seed_0(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "bff-fanout", "gc+slow-backend", 500, 0)
    assert {c["pattern"] for c in summary["truth"]} == {"gc_pause", "slow_dependency"}
    roots = by_name(spans, "GET /api/home")
    majors = [s for s in roots if '"major"' in s["events"]]
    assert majors and all(s["duration"] > 60 * MS for s in majors)
    inventory = [s["duration"] for s in by_name(spans, "GET /availability", "Server")]
    assert p(inventory, 99.5) > 10 * p(inventory, 50)


# --- pool-retry --------------------------------------------------------------------------------------


def _pool_wait(spans: list[dict]) -> list[float]:
    """Time inside ClaimRepository.findHistory before its SELECT starts: waiting for a connection."""
    kids = children(spans)
    return [kids[r["id"]][0]["start"] - r["start"] for r in by_name(spans, "ClaimRepository.findHistory")]


def test_pool_waits_come_from_connections_others_hold(tmp_path: Path) -> None:
    healthy, _ = load(tmp_path, "pool-retry", "healthy", 400, 1)  # Jaeger
    exhausted, summary = load(tmp_path, "pool-retry", "pool-exhaustion", 500, 1)
    assert summary["format"] == "jaeger" and summary["truth"][0]["pattern"] == "lock_contention"
    assert p(_pool_wait(healthy), 99) < 1 * MS
    assert p(_pool_wait(exhausted), 90) > 20 * MS
    # a request that waited found `pool size` others in flight on its pod, holding connections
    roots = by_name(exhausted, "POST /claims/{claimId}/score")
    waited = {
        r["trace"]
        for r, w in zip(by_name(exhausted, "ClaimRepository.findHistory"), _pool_wait(exhausted), strict=True)
        if w > 20 * MS
    }
    for root in [r for r in roots if r["trace"] in waited][:20]:
        pod = instance(root)
        busy = [o for o in roots if instance(o) == pod and o["start"] < root["start"] < o["end"]]
        assert len(busy) >= 3


def test_deadline_exceeded_attempts_end_at_the_deadline_and_are_retried(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "pool-retry", "deadline-retry", 500, 0)  # OTLP
    assert summary["format"] == "otlp-json"
    kids = children(spans)
    calls = [s for s in spans if s["kind"] == "Client" and s["name"] == "ocr.v1.DocumentModel/Extract"]
    failed = [s for s in calls if s["status"] == "Error"]
    assert len(failed) > 0.03 * 500
    for span in failed:
        assert span["attrs"]["rpc.grpc.status_code"] == "4" and span["duration"] >= 250 * MS
        assert kids[span["id"]][0]["end"] > span["end"]  # the model ran on after the client gave up
        same_peer = sorted(
            (s for s in kids[span["parent"]] if s["name"] == span["name"] and s["kind"] == "Client"),
            key=lambda s: s["start"],
        )
        assert len(same_peer) == 2 and same_peer[0]["status"] == "Error"  # first attempt failed, one retry
    durations = sorted(s["duration"] for s in failed)
    assert durations[len(durations) // 2] < 252 * MS  # the deadline, not the dependency, sets their length


# --- throttled-embedder ------------------------------------------------------------------------------


def _ends_bunched(spans: list[dict], pod: str) -> tuple[int, float]:
    """A pod's stretched `onnx.encode` spans (over 30 ms: four threads make its median ~4 ms) and the
    largest share of their ends within one 20 ms window of the 100 ms CFS period: a stall ends at the
    pod's period boundary and the rest of the work follows it."""
    ends = [
        s["end"] % 100_000_000
        for s in by_name(spans, "onnx.encode")
        if instance(s) == pod and s["duration"] > 30 * MS
    ]
    if not ends:
        return 0, 0.0
    bins = np.bincount(np.asarray(ends) // 10_000_000, minlength=10)
    return len(ends), max(bins[i] + bins[(i + 1) % 10] for i in range(10)) / len(ends)


def test_throttled_pods_stall_until_a_period_boundary_without_gc(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "throttled-embedder", "cpu-throttling", 700, 2)  # no GC events
    (cause,) = summary["truth"]
    throttled = set(cause["instances"])
    others = {instance(s) for s in spans if s["service"] == "embedder"} - throttled
    assert throttled and others
    for pod in throttled:
        stretched, bunched = _ends_bunched(spans, pod)
        assert stretched >= 5 and bunched > 0.6
    assert all(_ends_bunched(spans, pod)[0] < 3 for pod in others)
    assert all(s["events"] in ("", "[]") for s in spans)  # seed 2: the runtime reports nothing
    encode = by_name(spans, "onnx.encode")
    slow = [s["duration"] for s in encode if instance(s) in throttled]
    fine = [s["duration"] for s in encode if instance(s) in others]
    assert p(slow, 99) > 3 * p(fine, 99)


def test_embedding_payload_time_grows_with_rpc_response_size(tmp_path: Path) -> None:
    spans, _ = load(tmp_path, "throttled-embedder", "large-payload", 500, 0)
    calls = [s for s in spans if s["name"] == "embedding.v1.Embedder/Embed" and s["kind"] == "Client"]
    kids = children(spans)
    size = np.array([float(s["attrs"]["rpc.response.size"]) for s in calls])
    transfer = np.array([s["end"] - kids[s["id"]][0]["end"] for s in calls], dtype=float)
    assert size.max() > 1e6 and np.corrcoef(size, transfer)[0, 1] > 0.95
    gc = [
        s
        for s in spans
        if s["name"] == "embedding.v1.Embedder/Embed"
        and s["kind"] == "Server"
        and s["events"] not in ("", "[]")
    ]
    assert gc  # seed 0 reports the Go runtime's pauses, all under half a millisecond
    assert all(int(ns) < 500_000 for s in gc for ns in _pause_values(s["events"]))


def _pause_values(events: str) -> list[str]:
    return [e["Attributes"]["go.gc.pause_ns"] for e in json.loads(events)] if events.startswith("[") else []


def test_the_cli_writes_a_blind_family_run_and_rejects_another_familys_scenario(
    tmp_path: Path, capsys
) -> None:
    from tailscope.cli.main import main

    out = tmp_path / "retry.jsonl"
    assert (
        main(
            [
                "pipeline",
                "simulate",
                "--family",
                "bff-fanout",
                "--scenario",
                "timeout-retry",
                "--requests",
                "50",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["truth"][0]["pattern"] == "timeout_retry" and out.stat().st_size > 0
    assert (
        main(
            [
                "pipeline",
                "simulate",
                "--family",
                "bff-fanout",
                "--scenario",
                "gc-pressure",
                "--out",
                str(tmp_path / "x.jsonl"),
            ]
        )
        == 2
    )
    assert "unknown bff-fanout scenario 'gc-pressure'" in capsys.readouterr().err
    assert (
        main(["pipeline", "simulate", "--scenario", "timeout-retry", "--out", str(tmp_path / "y.jsonl")]) == 2
    )
