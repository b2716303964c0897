"""Tail vs body bins numeric attributes with many values (token counts) instead of dropping them,
so "long prompts make the tail" shows; numeric attributes that are times are left to the stages."""

from __future__ import annotations

from analysis_spans import load

from reference_pipeline.simulate.llm_server import LlmServerConfig, simulate_llm_server
from tailscope.analysis import Filter, tail_vs_body
from tailscope.store.duckdb.store import DuckDBStore as Store


def test_long_prompts_show_as_a_binned_token_count(db_path):
    load(db_path, "lp", simulate_llm_server(LlmServerConfig(requests=2000, seed=3, scenario="long-prompt")))
    attrs = tail_vs_body(Store(db_path), Filter(run="lp"), tail_quantile=0.95).attributes
    top = attrs.iloc[0]
    assert top["key"] == "gen_ai.usage.prompt_tokens"
    assert top["value"].startswith("≥ ") and int(top["value"][2:]) >= 800
    assert top["lift"] > 5
    prompt_bins = attrs[attrs["key"] == "gen_ai.usage.prompt_tokens"]["value"]
    assert 3 <= len(prompt_bins) <= 6  # bins, not one row per distinct count
    assert not attrs["key"].str.startswith("gen_ai.latency.time_to_first_token").any()
