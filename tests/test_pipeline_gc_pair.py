"""gc-pressure's what-if pair on the real service: with the collector on, full collections over its
live heap are reported (`python.gc` events) and stall requests; with `gc_collect=False` (`--gc off`)
the same allocation work runs and no collection is reported at all, so the pair differs by the pauses
alone (bench/whatif_pipeline.py)."""

from __future__ import annotations

import importlib.util

import orjson
import pytest

from reference_pipeline import span_model as sm

pytestmark = [
    pytest.mark.torch,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None, reason="needs PyTorch: pip install -e '.[pipeline]'"
    ),
    pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="needs tokenizers"),
]


def _gc_events(path) -> list[dict]:
    """The python.gc events on the service's request roots (their attributes)."""
    found = []
    for line in path.read_bytes().splitlines():
        for rs in orjson.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for event in span.get("events", []):
                        if event.get("name") == sm.GC_EVENT:
                            found.append({a["key"]: a["value"] for a in event.get("attributes", [])})
    return found


def test_gc_pressure_reports_no_collection_with_the_collector_off(tmp_path) -> None:
    """The collector-off half. The collector-on half is the same run with the collector on, which
    test_pipeline_e2e.py's test_gc_pressure_leaves_gen2_pauses_on_slow_requests makes (gc-pressure,
    12 s at 12 requests/s, seed 3) and checks more strictly (at least three full collections on the
    request roots, one of 20 ms or more, slower requests where they land): one run instead of two."""
    from reference_pipeline.runner import RunOptions, run_pipeline

    out = tmp_path / "gc.jsonl"
    summary = run_pipeline(
        RunOptions(scenario="gc-pressure", duration_s=12.0, rps=12.0, out=out, seed=3, gc_collect=False)
    )
    assert summary["requests"] > 100 and not summary["errors"]
    assert _gc_events(out) == [], "no collection at all with the collector off"
