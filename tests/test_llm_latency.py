"""LLM latency: TTFT and TPOT percentiles next to end-to-end latency, where spans carry them."""

from __future__ import annotations

import pytest
from analysis_spans import S, SpanColumns, add_trace, load
from test_app_pages import assert_clean, open_page

from reference_pipeline.simulate.llm_server import LlmServerConfig, simulate_llm_server
from tailscope.analysis import Filter, llm_latency
from tailscope.store.duckdb.store import DuckDBStore as Store


@pytest.fixture
def vllm_store(db_path):
    load(db_path, "vllm", simulate_llm_server(LlmServerConfig(requests=500, seed=1, scenario="steady")))
    return db_path


def test_vllm_ttft_and_tpot(vllm_store):
    table = llm_latency(Store(vllm_store), Filter(run="vllm")).set_index("metric")
    assert list(table.index) == [
        "end to end (ms)",
        "time to first token (ms)",
        "time per output token (ms)",
        "tokens in",
        "tokens out",
    ]
    assert (table["requests"] == 500).all()
    # the simulator's decode step is 12 ms + 0.4 ms per other running sequence
    assert 12.0 <= table.loc["time per output token (ms)", "p50"] <= 20.0
    assert table.loc["time to first token (ms)", "p50"] < table.loc["end to end (ms)", "p50"] / 3


def test_tgi_text_durations_and_no_llm_attributes(db_path):
    cols = SpanColumns()
    for i in range(20):
        attrs = {"time_per_token": f"{20 + i}ms", "generated_tokens": "30", "queue_time": "1ms"}
        add_trace(cols, S("generate", 0, 700, kind="Server", attrs=attrs), i + 1, offset_ms=i * 1000)
    add_trace(cols, S("GET /health", 0, 1, kind="Server"), 99)
    load(db_path, "tgi", cols)
    table = llm_latency(Store(db_path), Filter(run="tgi")).set_index("metric")
    assert table.loc["time per output token (ms)", "p50"] == pytest.approx(29.5)
    assert table.loc["tokens out", "requests"] == 20
    cols = SpanColumns()
    add_trace(cols, S("GET /predict", 0, 10, kind="Server", attrs={"tokenizer": "bpe"}), 1)
    load(db_path, "plain", cols)
    assert llm_latency(Store(db_path), Filter(run="plain")).empty


def test_the_overview_shows_llm_latency(vllm_store, monkeypatch):
    at = open_page(vllm_store, "views/overview.py", monkeypatch, {"run": "vllm"})
    assert_clean(at)
    assert any(s.value == "LLM latency" for s in at.subheader)
