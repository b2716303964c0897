"""The diagnosis groups spans by the process that ran them also where the tracer names processes its
own way: Jaeger's `hostname` / `ip` process tags, Zipkin's endpoint (net.host.ip and port). Without
that, every replica of a service is one instance and per-process stalls cannot be seen."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.loader import load_paths
from tailscope.analysis.diagnosis.load import load_frame
from tailscope.store.engine import open_store


def _jaeger(path: Path, tag: str) -> None:
    traces = []
    for i in range(4):
        host = f"api-{i % 2}"
        traces.append({
            "traceID": f"{i + 1:032x}",
            "spans": [{
                "traceID": f"{i + 1:032x}", "spanID": f"{i + 1:016x}", "operationName": "GET /x",
                "references": [], "startTime": 1_700_000_000_000_000 + i * 1000, "duration": 500,
                "processID": "p1", "tags": [{"key": "span.kind", "type": "string", "value": "server"}],
            }],
            "processes": {
                "p1": {"serviceName": "api", "tags": [{"key": tag, "type": "string", "value": host}]}
            },
        })
    path.write_text(json.dumps({"data": traces}))


def test_jaeger_hostname_and_ip_tags_name_the_instance(tmp_path: Path) -> None:
    for tag in ("hostname", "ip"):
        source = tmp_path / f"{tag}.json"
        _jaeger(source, tag)
        db = tmp_path / f"{tag}.duckdb"
        load_paths([source], db, "run")
        with open_store(db).reading() as reader:
            frame = load_frame(reader, "run")
        assert sorted(frame.instances) == ["api/api-0", "api/api-1"], (tag, frame.instances)


def test_serverless_execution_environments_are_instances(tmp_path: Path) -> None:
    """A function's execution environments (OpenTelemetry's `faas.instance`, or the awsxray receiver's
    `aws.log.stream.names`: one log stream per environment) each run one invoke at a time: they are the
    processes, for the spans and for the GC events they report (else every environment is one instance
    and one request's pause seems to overlap every request in flight)."""
    for tag in ("faas.instance", "aws.log.stream.names"):
        source = tmp_path / f"{tag}.json"
        _jaeger(source, tag)
        data = json.loads(source.read_text())
        for trace in data["data"]:
            span = trace["spans"][0]
            span["logs"] = [{"timestamp": span["startTime"] + 100, "fields": [
                {"key": "event", "type": "string", "value": "python.gc"},
                {"key": "gc.duration_ns", "type": "int64", "value": 50_000}]}]
        source.write_text(json.dumps(data))
        db = tmp_path / f"{tag}.duckdb"
        load_paths([source], db, "run")
        with open_store(db).reading() as reader:
            frame = load_frame(reader, "run")
        assert sorted(frame.instances) == ["api/api-0", "api/api-1"], (tag, frame.instances)
        assert len(frame.gc_time) == 4
        assert sorted({frame.instances[i] for i in frame.gc_instance}) == ["api/api-0", "api/api-1"], tag


def _pods(path: Path, with_pid: bool) -> None:
    """Four requests on two pods of one service that the collector's k8sattributes processor names
    (`k8s.pod.name`, no host name or instance id), each reporting a GC pause."""
    _jaeger(path, "k8s.pod.name")
    data = json.loads(path.read_text())
    for trace in data["data"]:
        span = trace["spans"][0]
        tags = trace["processes"]["p1"]["tags"]
        tags[0]["value"] = "api-7d4b9-" + tags[0]["value"]
        if with_pid:
            tags.append({"key": "process.pid", "type": "int64", "value": 1})
        span["logs"] = [{"timestamp": span["startTime"] + 100, "fields": [
            {"key": "event", "type": "string", "value": "python.gc"},
            {"key": "gc.duration_ns", "type": "int64", "value": 50_000}]}]
    path.write_text(json.dumps(data))


def test_kubernetes_pods_are_instances(tmp_path: Path) -> None:
    """Pods named by `k8s.pod.name` only are the processes (a CPU quota, a cold replica, a pause is a
    pod's), on both engines; a pid beside it (1 in every container) does not merge them."""
    for with_pid in (False, True):
        source = tmp_path / f"pods{with_pid}.json"
        _pods(source, with_pid)
        db = tmp_path / f"pods{with_pid}.duckdb"
        load_paths([source], db, "run")
        with open_store(db).reading() as reader:
            frame = load_frame(reader, "run")
        suffix = ":1" if with_pid else ""
        expected = [f"api/api-7d4b9-api-{i}{suffix}" for i in (0, 1)]
        assert sorted(frame.instances) == expected, frame.instances
        assert sorted({frame.instances[i] for i in frame.gc_instance}) == expected


def test_kubernetes_pods_are_instances_on_clickhouse(tmp_path: Path, chdb_store) -> None:
    source = tmp_path / "pods.json"
    _pods(source, with_pid=False)
    load_paths([source], chdb_store, "run")
    with chdb_store.reading() as reader:
        frame = load_frame(reader, "run")
    expected = ["api/api-7d4b9-api-0", "api/api-7d4b9-api-1"]
    assert sorted(frame.instances) == expected, frame.instances
    assert sorted({frame.instances[i] for i in frame.gc_instance}) == expected
