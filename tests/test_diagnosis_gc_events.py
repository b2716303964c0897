"""Issue 25: pauses the runtime reports. Their durations under the OpenTelemetry runtime conventions
(seconds: v8js.gc.duration, jvm.gc.duration) are read, and pauses that slow many requests beside a
heavier cause are named though they carry little of the p99."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.loader import load_paths
from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.load import load_frame
from tailscope.analysis.source import reading
from tailscope.store.duckdb.store import DuckDBStore
from tests.mechanism_stalls import paused_aggregator


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_reported_pauses_beside_a_heavy_dependency_are_named() -> None:
    """8-15 ms pauses every 100-300 ms (reported) add ~6-10 % of the median latency to the mean
    request while the backend's hangs own the p99; about one request in flight, so timing alone
    cannot align them (before: gc_pause 0.10)."""
    result = diagnose_frame(paused_aggregator(5, gc_events=True, rps=20.0))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "slow_dependency") >= 0.5 and _conf(result, "gc_pause") >= 0.5, found


def _kv(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def _loaded_frame(tmp_path: Path, spans: list[dict]):
    """The diagnosis' frame of one service's OTLP spans, written to a file and loaded by the real loader."""
    resource = {"attributes": [_kv("service.name", "svc"), _kv("service.instance.id", "a")]}
    scope = {"scope": {"name": "s"}, "spans": spans}
    record = {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    db = tmp_path / "store.duckdb"
    assert not load_paths([path], db, "run").failed
    with reading(DuckDBStore(db)) as conn:
        return load_frame(conn, "run")


def test_gc_event_durations_in_seconds_are_read(tmp_path: Path) -> None:
    start = 1_700_000_000_000_000_000
    events = [("v8js.gc", "v8js.gc.duration", "0.0125"), ("jvm.gc", "jvm.gc.duration", "0.2"),
              ("gc", "gc.duration_ms", "3.5"), ("runtime.gc", "runtime.gc.pause_us", "1500"),
              ("go.gc", "pause", "0.004"), ("gc", "python.gc.elapsed_s", "0.0625")]
    spans = []
    for i, (name, key, value) in enumerate(events):
        t = start + i * 10_000_000
        event = {"timeUnixNano": str(t + 1000), "name": name, "attributes": [_kv(key, value)]}
        spans.append({"traceId": f"{i:032x}", "spanId": f"{i + 1:016x}", "name": "GET /", "kind": 2,
                      "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 5_000_000), "events": [event]})
    frame = _loaded_frame(tmp_path, spans)
    # any key naming a pause, a duration or the time elapsed, its unit from its suffix (seconds without
    # one)
    assert sorted(frame.gc_dur.tolist()) == [1_500_000, 3_500_000, 4_000_000, 12_500_000, 62_500_000,
                                             200_000_000]


def test_allocation_stalls_are_read_as_collector_waits(tmp_path: Path) -> None:
    """A thread's allocation stall (JFR's jdk.ZAllocationStall: it waited for the collector to free
    memory) is the collector's, with its duration; a pinned virtual thread's event is not (before: the
    stall was not read: its name says no `gc`)."""
    start = 1_700_000_000_000_000_000
    events = [("jdk.ZAllocationStall", "31.5"), ("jdk.VirtualThreadPinned", "25.0")]
    spans = []
    for i, (name, value) in enumerate(events):
        t = start + i * 10_000_000
        event = {"timeUnixNano": str(t + 1000), "name": name,
                 "attributes": [_kv("jfr.duration_ms", value), _kv("jfr.thread", "virtual-41")]}
        spans.append({"traceId": f"{i:032x}", "spanId": f"{i + 1:016x}", "name": "GET /", "kind": 2,
                      "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 50_000_000), "events": [event]})
    frame = _loaded_frame(tmp_path, spans)
    assert frame.gc_dur.tolist() == [31_500_000]
