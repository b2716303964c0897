"""Inside the stages: which spans carry a band's time against the median band."""

from __future__ import annotations

import pytest
from analysis_spans import S, SpanColumns, add_trace, load
from test_app_pages import assert_clean, open_page

from reference_pipeline.simulate.llm_server import LlmServerConfig, simulate_llm_server
from tailscope.analysis import Filter, stage_breakdown
from tailscope.store.duckdb.store import DuckDBStore as Store


def test_prefill_carries_the_long_prompt_tail(db_path) -> None:
    load(db_path, "lp", simulate_llm_server(LlmServerConfig(requests=2000, seed=3, scenario="long-prompt")))
    table = stage_breakdown(Store(db_path), Filter(run="lp"), "p99")
    top = table.iloc[0]
    assert (top["stage"], top["span_name"]) == ("model_forward", "prefill")
    assert top["band_ms"] > 10 * top["median_ms"]


def test_the_fallback_call_inside_feature_hydration(db_path) -> None:
    cols = SpanColumns()
    for i in range(400):
        miss = i % 10 == 0
        children = [S("kv.get", 0, 1, stage="feature_hydration")]
        if miss:
            children.append(S("pg.select_profile", 1, 40, stage="feature_hydration"))
        end = 41 if miss else 2
        add_trace(
            cols,
            S(
                "POST /score",
                0,
                end + 5,
                kind="Server",
                children=[
                    S("features", 0, end, stage="feature_hydration", children=children),
                    S("model", end, end + 5, stage="model_forward"),
                ],
            ),
            i + 1,
            offset_ms=i * 100,
        )
    load(db_path, "cache", cols)
    table = stage_breakdown(Store(db_path), Filter(run="cache"), "p90").set_index("span_name")
    assert table.index[0] == "pg.select_profile"
    assert table.loc["pg.select_profile", "band_ms"] == pytest.approx(39, abs=0.01)
    assert table.loc["pg.select_profile", "median_ms"] == 0
    assert abs(table.loc["model", "delta_ms"]) < 0.01


def test_the_waterfall_page_shows_it(db_path, monkeypatch) -> None:
    load(db_path, "lp", simulate_llm_server(LlmServerConfig(requests=600, seed=3, scenario="long-prompt")))
    at = open_page(db_path, "views/waterfall.py", monkeypatch, {"run": "lp"})
    assert_clean(at)
    assert any("which spans carry" in e.label for e in at.expander)
