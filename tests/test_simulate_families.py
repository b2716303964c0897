"""The simulator's held-out trace families (region, readthrough, queue-worker) and two-cause scenarios:
each family renders the same model in its own shape (span tree, kinds, names, attribute conventions),
and `a+b` scenarios plant both mechanisms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reference_pipeline.simulate.api import simulate_to_file
from reference_pipeline.simulate.config import scenario_config


def _spans(path: Path) -> tuple[list[dict], list[dict]]:
    spans, resources = [], []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            attrs = {a["key"]: next(iter(a["value"].values())) for a in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["resource"] = attrs
                    spans.append(s)
            resources.append(attrs)
    return spans, resources


def _attrs(span: dict) -> dict:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", ())}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[dict], list[dict]]]:
    tmp = tmp_path_factory.mktemp("families")
    out = {}
    for topology in ("region", "readthrough", "queue-worker"):
        path = tmp / f"{topology}.jsonl"
        simulate_to_file(path, "cold-cache", 300, 2, topology=topology)
        out[topology] = _spans(path)
    return out


@pytest.mark.parametrize("topology", ["region", "readthrough", "queue-worker"])
def test_no_family_carries_our_names_or_an_instance_id(runs, topology: str) -> None:
    spans, resources = runs[topology]
    keys = {k for s in spans for k in _attrs(s)} | {k for r in resources for k in r}
    assert not any(k.startswith("tailscope.") for k in keys)
    assert "service.instance.id" not in keys and {"host.name", "process.pid"} <= keys
    assert not {s["name"] for s in spans} & {"model.forward", "queue.wait", "feature_hydration", "lock.wait"}


def test_region_caller_wraps_the_server_across_a_long_link(runs) -> None:
    spans, _ = runs["region"]
    by_id = {s["spanId"]: s for s in spans}
    servers = [s for s in spans if s["name"] == "POST /v1/score"]
    assert len(servers) == 300
    gaps = []
    for s in servers:
        call = by_id[s["parentSpanId"]]
        assert call["kind"] == 3 and call["resource"]["service.name"] == "checkout-web"
        assert call["resource"]["cloud.region"] != s["resource"]["cloud.region"]
        gaps.append(
            (int(call["endTimeUnixNano"]) - int(call["startTimeUnixNano"]))
            - (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"]))
        )
    gaps.sort()
    assert 70e6 < gaps[150] < 85e6  # two ~38 ms trips
    assert "http.method" in _attrs(servers[0]) and "http.request.method" not in _attrs(servers[0])


def test_readthrough_fallback_is_a_sibling_after_the_lookup_on_misses_only(runs) -> None:
    spans, _ = runs["readthrough"]
    by_trace: dict[str, list[dict]] = {}
    for s in spans:
        by_trace.setdefault(s["traceId"], []).append(s)
    misses = 0
    for trace in by_trace.values():
        names = {s["name"]: s for s in trace}
        assert "GET" in names
        if "SELECT user_features" in names:
            misses += 1
            get, select = names["GET"], names["SELECT user_features"]
            assert get["parentSpanId"] == select["parentSpanId"]
            assert int(get["endTimeUnixNano"]) <= int(select["startTimeUnixNano"])
            assert "SET" in names
    assert 0.2 < misses / len(by_trace) < 0.8  # a cold cache misses often, not always


def test_queue_worker_consumer_starts_after_its_producer_ends(runs) -> None:
    spans, _ = runs["queue-worker"]
    by_id = {s["spanId"]: s for s in spans}
    consumers = [s for s in spans if s["kind"] == 5]
    assert len(consumers) == 300
    for c in consumers:
        producer = by_id[c["parentSpanId"]]
        assert producer["kind"] == 4 and producer["resource"]["service.name"] == "intake-api"
        assert c["resource"]["service.name"] == "scoring-worker"
        assert int(producer["endTimeUnixNano"]) <= int(c["startTimeUnixNano"])
        api = by_id[producer["parentSpanId"]]
        assert int(api["endTimeUnixNano"]) >= int(c["endTimeUnixNano"])
        assert _attrs(c)["messaging.system"] == "kafka"


def test_queue_worker_kinds_survive_jaeger(tmp_path: Path) -> None:
    from ingest.loader import load_paths
    from tailscope.store.duckdb.store import DuckDBStore as Store

    out = tmp_path / "run.json"
    simulate_to_file(out, "steady", 60, 1, topology="queue-worker", fmt="jaeger")
    load_paths([out], tmp_path / "s.duckdb", "run")
    with Store(tmp_path / "s.duckdb").reader() as conn:
        kinds = dict(
            conn.execute("SELECT SpanName, any_value(SpanKind) FROM otel_traces GROUP BY 1").fetchall()
        )
    assert kinds["send score-requests"] == "Producer" and kinds["process score-requests"] == "Consumer"


def test_two_cause_scenarios_merge_both_mechanisms() -> None:
    both = scenario_config("gc-pressure+slow-downstream", 1000, 0)
    assert both.gc_major_rate == scenario_config("gc-pressure", 1000, 0).gc_major_rate > 0
    assert both.downstream_pareto == scenario_config("slow-downstream", 1000, 0).downstream_pareto
    expiry = scenario_config("key-expiry+gc-pressure", 1000, 0)
    assert expiry.cache_ttl_s == scenario_config("key-expiry", 1000, 0).cache_ttl_s
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario_config("burst+nonsense", 100, 0)


def test_family_changes_apply_under_the_scenario(tmp_path: Path) -> None:
    region = scenario_config("network-jitter", 100, 0, topology="region")
    assert region.net_ms[0] == 38.0 and region.slow_clients == 2
    with pytest.raises(ValueError, match="unknown topology"):
        scenario_config("steady", 100, 0, topology="mesh")


def test_cli_takes_a_two_cause_scenario_and_a_family(tmp_path: Path, capsys) -> None:
    from tailscope.cli.main import main

    out = tmp_path / "run.jsonl"
    argv = ["pipeline", "simulate", "--scenario", "burst+slow-downstream", "--topology", "readthrough"]
    assert main([*argv, "--requests", "80", "--out", str(out)]) == 0
    assert "burst+slow-downstream: 80 requests" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["pipeline", "simulate", "--scenario", "burst+bogus", "--out", str(out)])
    assert "unknown scenario 'burst+bogus'" in capsys.readouterr().err
