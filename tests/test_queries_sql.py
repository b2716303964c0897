"""SQL builders: text and params checked against tests/golden/, and hostile values stay parameters.

Regenerate the golden files after an intended SQL change: UPDATE_GOLDEN=1 pytest tests/test_queries_sql.py
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from analysis_spans import S, SpanColumns, add_trace, load

from tailscope.analysis import Filter, StageRule, default_rules, overview, slowest_traces, waterfall
from tailscope.analysis.types import PhaseRule
from tailscope.store.duckdb.statements import filtered, span_tree_query
from tailscope.store.duckdb.store import DuckDBStore as Store

GOLDEN = Path(__file__).parent / "golden"
WHEN = datetime(2026, 1, 2, 3, 4, 5)

CASES = {
    "waterfall_run_p99": lambda: filtered("waterfall", Filter(run="r1"), 0.99, 0.999, False),
    "overview_all_filters": lambda: filtered(
        "overview", Filter(run="r1", service="api", route="/v1/predict", instance="i-1", start=WHEN, end=WHEN)
    ),
    "heatmap_stage": lambda: filtered("heatmap", Filter(run="r1"), "model_forward", 60, 10),
    "request_list_slowest": lambda: filtered(
        "request_list", Filter(), "", None, None, None, None, -(2**63), 50
    ),
    "tail_stages_quantile": lambda: filtered(
        "tail_stages", Filter(run="r1"), 0.99, False, None, None, "", None, "", None
    ),
    # a derive that keeps its runs' path rows (rule_remap.py): span_tree.sql's [paths] lines
    "span_tree_paths_run": lambda: span_tree_query(
        [
            StageRule(1, "queue", span_kind="Consumer"),
            StageRule(2, "model_forward", name_regex="forward"),
            StageRule(3, "downstream", span_kind="Client", attribute_regex="^http\\."),
        ],
        "run",
        "r1",
        output="paths",
        phase_rules=[PhaseRule(1, "fw", "queue", "queue", "attribute", "fw.queue_time", unit="ms")],
    ),
    "span_tree_one_trace": lambda: span_tree_query(
        [
            StageRule(1, "queue", span_kind="Consumer"),
            StageRule(2, "model_forward", name_regex="forward"),
            StageRule(3, "downstream", span_kind="Client", attribute_regex="^http\\."),
        ],
        "trace",
        "r1",
        trace_id="ab" * 16,
        phase_rules=[
            PhaseRule(1, "fw", "queue", "queue", "attribute", "fw.queue_time", unit="ms"),
            PhaseRule(
                2, "fw", "infer", "model_forward", "events", "INFER_START", "INFER_END", name_regex="^m"
            ),
        ],
    ),
}


def render(text: str, params: list) -> str:
    return text.rstrip() + "\n-- params: " + json.dumps(params, default=str) + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_builder_output_matches_golden(case):
    text, params = CASES[case]()
    path = GOLDEN / f"{case}.sql"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(render(text, params))
    assert render(text, params) == path.read_text()
    assert text.count("?") == len(params) or "$1" in text


def test_every_builder_statement_parses():
    conn = duckdb.connect()
    from tailscope.store.duckdb.connection import ensure_schema

    ensure_schema(conn)
    for case in CASES.values():
        text, params = case()
        conn.execute(f"EXPLAIN {text}", params)
    text, params = span_tree_query(default_rules(), "run", "r")
    conn.execute(f"EXPLAIN {text}", params)


HOSTILE = [
    "x' OR '1'='1",
    "'; DROP TABLE otel_traces; --",
    'r1" OR "1"="1',
    "\\'; SELECT 1; --",
    "{where}",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_filter_values_only_travel_as_parameters(value):
    flt = Filter(run=value, service=value, route=value, instance=value)
    text, params = filtered("overview", flt)
    clean_text, _ = filtered("overview", Filter(run="a", service="b", route="c", instance="d"))
    assert text == clean_text
    assert value not in text
    assert params == [value] * 4


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_find_nothing_and_harm_nothing(db_path, value):
    cols = SpanColumns()
    add_trace(cols, S("root", 0, 10, kind="Server"), 1)
    load(db_path, "r1", cols)
    store = Store(db_path)
    flt = Filter(run=value, service=value, route=value)
    assert overview(store, flt).runs == []
    assert slowest_traces(store, flt).empty
    assert waterfall(store, Filter(run=value)).reason
    assert overview(store, Filter()).runs[0].requests == 1


def test_hostile_rule_regex_is_a_parameter():
    rule = StageRule(1, "queue", name_regex="'); DROP TABLE requests; --")
    text, params = span_tree_query([rule], "run", "r1")
    assert "DROP TABLE" not in text
    assert rule.name_regex in params
