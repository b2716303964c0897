"""Stage rules: defaults on the reference pipeline's span names, validation, editing, the mapping shown."""

from __future__ import annotations

import pytest
from analysis_spans import S, SpanColumns, add_trace, load

from reference_pipeline import span_model
from tailscope.analysis import (
    Filter,
    StageRule,
    default_rules,
    list_rules,
    stage_mapping,
    validate_rules,
    waterfall,
)
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.rule_remap import replace_rules
from tailscope.store.duckdb.store import DuckDBStore as Store

# span name → stage the default rules must give WITHOUT the tailscope.stage attribute
NAME_CASES = {
    span_model.RECEIVE: "ingress",
    span_model.PARSE: "parsing",
    span_model.HYDRATE: "feature_hydration",
    span_model.TOKENIZE: "preprocessing",
    span_model.QUEUE_WAIT: "queue",
    span_model.FORWARD: "model_forward",
    span_model.POSTPROCESS: "postprocessing",
    span_model.SERIALIZE: "serialization",
    "embed_query": "preprocessing",
    "calibrate_scores": "postprocessing",
    "validate_payload": "parsing",
    "run_inference": "model_forward",
}


@pytest.fixture(scope="module")  # a plain dict the tests below only read: loaded and mapped once
def mapped(tmp_path_factory):
    db_path = tmp_path_factory.mktemp("stages") / "store.duckdb"
    cols = SpanColumns()
    children = [S(name, i, i + 1) for i, name in enumerate(NAME_CASES)]
    children += [
        S("GET", 20, 21, kind="Client", attrs={"db.system": "redis"}),
        S("POST /enrich", 21, 22, kind="Client", attrs={"http.request.method": "POST"}),
        S("publish", 22, 23, kind="Producer"),
        S("explicit", 23, 24, stage="downstream"),
        S(span_model.POSTPROCESS, 24, 26, children=[S(span_model.LOCK_WAIT, 24, 25)]),
    ]
    add_trace(cols, S(span_model.ROOT_SPAN, 0, 30, kind="Server", children=children), 1)
    load(db_path, "r", cols)
    frame = stage_mapping(Store(db_path), "r")
    return {(row.span_name, row.span_kind): (row.stage, row.rule) for row in frame.itertuples()}


@pytest.mark.parametrize(("name", "stage"), NAME_CASES.items())
def test_default_name_rules(mapped, name, stage):
    assert mapped[(name, "Internal")][0] == stage


def test_semantic_conventions_explicit_attribute_root_and_inheritance(mapped):
    assert mapped[("GET", "Client")][0] == "feature_hydration"
    assert mapped[("POST /enrich", "Client")][0] == "downstream"
    assert mapped[("publish", "Producer")][0] == "queue"
    assert mapped[("explicit", "Internal")] == ("downstream", "attribute tailscope.stage")
    assert mapped[(span_model.ROOT_SPAN, "Server")] == ("ingress", "request root")
    assert mapped[(span_model.LOCK_WAIT, "Internal")] == ("postprocessing", "inherited from parent")


def test_validation_names_each_problem(db_path):
    rules = [
        StageRule(1, "model_forward", name_regex="(unclosed"),
        StageRule(2, "warp_drive", name_regex="x"),
        StageRule(3, "queue"),
        StageRule(4, "queue", span_kind="Sideways"),
    ]
    problems = validate_rules(Store(db_path), rules)
    assert len(problems) == 4
    assert "not a valid RE2 regex" in problems[0]
    assert "unknown stage 'warp_drive'" in problems[1]
    assert "no condition" in problems[2]
    assert "unknown span kind" in problems[3]


def test_replacing_rules_recomputes_every_run(db_path):
    cols = SpanColumns()
    add_trace(cols, S("root", 0, 10, kind="Server", children=[S("mystery_step", 0, 6)]), 1)
    load(db_path, "r", cols)
    store = Store(db_path)
    assert waterfall(store, Filter(run="r"), "p50").stages[-1].mean_ms == 10.0  # all unattributed
    rules = [StageRule(0, "model_forward", name_regex="^mystery"), *default_rules()]
    with connect_writer(db_path) as conn:
        replace_rules(conn, rules)
    assert list_rules(store)[0].name_regex == "^mystery"
    bars = {b.stage: b.mean_ms for b in waterfall(store, Filter(run="r"), "p50").stages}
    assert bars["model_forward"] == 6.0


def test_invalid_rules_change_nothing(db_path):
    load(db_path, "r", SpanColumns())
    with connect_writer(db_path) as conn, pytest.raises(ValueError, match="RE2"):
        replace_rules(conn, [StageRule(1, "queue", name_regex="[")])
    assert list_rules(Store(db_path)) == default_rules()


def test_an_attribute_regex_matches_each_key_value_pair_with_its_own_anchors(db_path):
    """Attributes are stored as JSON text; a rule's attribute regex still sees one `key=value` per
    attribute, `^` and `$` anchored to that pair, whatever the other attributes hold."""
    children = [
        S("step_a", 0, 1, attrs={"team": "x", "db.system": "redis"}),
        S("step_b", 1, 2, attrs={"note": "see db.system=redis"}),
        S("step_c", 2, 3, attrs={"db.system": "redis-cluster"}),
        S("step_d", 3, 4, attrs={"q": 'say "hi",\n"x":"y"', "db.system": "redis", "z": "\\"}),
        S("step_e", 4, 5, attrs={"db.system": "redis\nother"}),
        # an unknown tailscope.stage value: the rules are tried (the attribute lines are built for it)
        S("step_f", 5, 6, attrs={"tailscope.stage": "nonsense", "db.system": "redis"}),
        S("step_g", 6, 7, attrs={"tailscope.stage": "queue", "db.system": "redis"}),  # the attribute wins
    ]
    cols = SpanColumns()
    add_trace(cols, S("root", 0, 10, kind="Server", children=children), 1)
    load(db_path, "r", cols)
    with connect_writer(db_path) as conn:
        replace_rules(
            conn, [StageRule(1, "downstream", attribute_regex=r"^db\.system=redis$"), *default_rules()]
        )
    frame = stage_mapping(Store(db_path), "r")
    stages = {row.span_name: row.stage for row in frame.itertuples()}
    assert [stages[f"step_{x}"] for x in "abcdefg"] == [
        "downstream",
        "unattributed",
        "unattributed",
        "downstream",
        "unattributed",
        "downstream",
        "queue",
    ]
