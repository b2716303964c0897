"""The diagnosis on a serving framework's phases: an LLM server traced the way vLLM does (one span
per request, phases as attributes, no child spans) is diagnosed like any other service."""

from __future__ import annotations

import pytest
from analysis_spans import load
from conftest import seed_variants

from reference_pipeline.simulate.llm_server import LlmServerConfig, simulate_llm_server
from tailscope.analysis.diagnosis import diagnose
from tailscope.store.duckdb.store import DuckDBStore as Store


def diagnosed(db_path, scenario: str):
    load(db_path, scenario, simulate_llm_server(LlmServerConfig(requests=2000, seed=3, scenario=scenario)))
    return diagnose(Store(db_path), scenario).findings


def test_a_queue_bound_vllm_run_is_queueing(db_path):
    findings = diagnosed(db_path, "burst")
    assert findings[0].pattern == "queueing" and findings[0].confidence >= 0.8
    others = [f for f in findings if f.pattern not in ("queueing", "unexplained_tail", "gc_pause")]
    assert not [f for f in others if f.confidence >= 0.5]


@seed_variants(0, 1, 3, 4)
def test_a_vllm_burst_raises_no_pause_alarm(tmp_path, seed):
    # the queue drains for seconds after a burst while decode steps slow down: requests stay co-slow
    # for longer than the median request, as in a pause, but the model keeps finishing work (it read
    # gc_pause 0.48-0.63 before the long-stall rule asked for a stretch in which nothing finished)
    db = tmp_path / "burst.duckdb"
    load(db, "burst", simulate_llm_server(LlmServerConfig(requests=2000, seed=seed, scenario="burst")))
    findings = diagnose(Store(db), "burst").findings
    assert findings[0].pattern == "queueing"
    assert not [f for f in findings if f.pattern == "gc_pause" and f.confidence >= 0.5], findings


@pytest.mark.parametrize("scenario,span", [("long-prompt", "prefill"), ("steady", "decode")])
def test_compute_bound_names_the_phase_that_carries_the_tail(db_path, scenario, span):
    top = diagnosed(db_path, scenario)[0]
    assert top.pattern == "compute_bound" and top.confidence >= 0.8
    assert top.span_name == span
    assert span in top.evidence["summary"]
