"""Diagnosis on the held-out trace family: the simulator's `gateway` topology (another service's shape,
not only other names: an API gateway root, a gRPC call into a model server, deeper nesting, no queue
or lock span, host + pid instances, GC reported as `GC pause` events or not at all). The runs go
through trace files (OTLP/JSON lines and Jaeger JSON) and the real loader. Small runs; the full
matrix is `bench/accuracy.py --topologies gateway`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailscope.analysis.diagnosis import diagnose
from tailscope.store.duckdb.store import DuckDBStore as Store

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
loader = pytest.importorskip("ingest.loader")

REQUESTS = 1500
THIN, THICK = (0.12, 0.4), (25.0, 0.1)  # the gateway's own work per request (median ms, sigma)
# run -> (scenario, seed, format, GC events reported, gateway work, planted pattern or None for steady)
RUNS = {
    "steady": ("steady", 1, "otlp-json", True, THIN, None),
    # a thick gateway: the model server's call covers only about half of the gateway's span
    "gc-pressure": ("gc-pressure", 2, "otlp-json", False, THICK, "gc_pause"),
    "slow-downstream": ("slow-downstream", 3, "jaeger", True, THIN, "slow_dependency"),
    "burst": ("burst", 4, "jaeger", False, THIN, "queueing"),
    "cold-cache": ("cold-cache", 5, "otlp-json", True, THIN, "cache_miss"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    tmp = tmp_path_factory.mktemp("heldout")
    db = tmp / "store.duckdb"
    for run, (scenario, seed, fmt, gc_events, gateway_ms, _) in RUNS.items():
        out = tmp / f"{run}.{'jsonl' if fmt == 'otlp-json' else 'json'}"
        simulate_api.simulate_to_file(out, scenario, REQUESTS, seed, fmt=fmt, topology="gateway",
                                      gc_events=gc_events, gateway_ms=gateway_ms)
        loaded = loader.load_paths([out], db, run)
        assert not loaded.failed, [f.error for f in loaded.failed]
    return Store(db)


@pytest.mark.parametrize("run", [r for r, spec in RUNS.items() if spec[5]])
def test_top_finding_is_the_planted_cause(store: Store, run: str) -> None:
    findings = diagnose(store, run).findings
    assert findings, f"{run}: no finding"
    assert findings[0].pattern == RUNS[run][5], [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert findings[0].confidence > 0.5


def test_one_cause_seen_on_nested_spans_is_one_finding(store: Store) -> None:
    # misses make `feature_lookup` bimodal, and so its parent `preprocess`: one finding, the inner span
    misses = [f for f in diagnose(store, "cold-cache").findings if f.pattern == "cache_miss"]
    assert [f.span_name for f in misses] == ["feature_lookup"], [(f.span_name, f.confidence) for f in misses]
    assert "'preprocess'" in misses[0].evidence["summary"]


def test_steady_raises_no_false_alarm(store: Store) -> None:
    loud = [(f.pattern, round(f.confidence, 2)) for f in diagnose(store, "steady").findings
            if f.confidence > 0.5]
    assert all(p == "compute_bound" for p, _ in loud), loud


def test_the_family_differs_from_the_pipeline_in_shape(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    simulate_api.simulate_to_file(out, "steady", 50, 0, topology="gateway")
    spans, resources = [], []
    for line in out.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            attrs = {a["key"] for a in rs["resource"]["attributes"]}
            resources.append(attrs)
            for ss in rs["scopeSpans"]:
                spans += ss["spans"]
    keys = {a["key"] for s in spans for a in s.get("attributes", ())} | set().union(*resources)
    assert not any(k.startswith("tailscope.") for k in keys)
    assert "service.instance.id" not in keys and {"host.name", "process.pid"} <= keys
    by_id = {s["spanId"]: s for s in spans}
    roots = [s for s in spans if "parentSpanId" not in s]
    assert {s["name"] for s in roots} == {"POST /api/v2/score"}
    depth = max(_depth(s, by_id) for s in spans)
    assert depth >= 5  # gateway → call → model server → preprocess → feature_lookup → redis GET
    names = {s["name"] for s in spans}
    assert not any("queue" in n or "lock" in n for n in names)


def _depth(span: dict, by_id: dict) -> int:
    depth = 0
    while "parentSpanId" in span:
        span, depth = by_id[span["parentSpanId"]], depth + 1
    return depth
