"""Phase rules: a span's self-reported phases (durations as attributes, start/end events) become
stage intervals under it (tailscope/analysis/phases.py, sql/phase_spans.sql)."""

from __future__ import annotations

import pytest
from analysis_spans import S, SpanColumns, add_trace, load

from tailscope.analysis import Filter, stage_mapping, trace_gantt, waterfall
from tailscope.analysis.phases import default_phase_rules
from tailscope.analysis.types import PhaseRule
from tailscope.store.duckdb.connection import connect_reader, connect_writer
from tailscope.store.duckdb.derive import replace_phase_rules
from tailscope.store.duckdb.rules import phase_rules_in_force
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.vocabulary import ALL_STAGES

STAGE_COLUMNS = list(ALL_STAGES)


def request_row(db, trace_no: int) -> dict[str, float]:
    with connect_reader(db) as conn:
        cols = ", ".join(f"{c}_ns" for c in STAGE_COLUMNS)
        row = conn.execute(
            f"SELECT Duration, SpanCount, {cols} FROM requests WHERE TraceId = ?", [f"{trace_no:032x}"]
        ).fetchone()
    return {"duration": row[0] / 1e6, "spans": row[1]} | {
        c: v / 1e6 for c, v in zip(STAGE_COLUMNS, row[2:], strict=True)
    }


def vllm_request(queue_s: float, prefill_s: float, decode_s: float, lead_s: float = 0.005) -> S:
    """vLLM's one span per request: arrival to finish, phases as gen_ai.latency.* seconds."""
    ttft = lead_s + queue_s + prefill_s
    e2e = ttft + decode_s + 0.010
    attrs = {
        "gen_ai.latency.time_in_queue": repr(queue_s),
        "gen_ai.latency.time_to_first_token": repr(ttft),
        "gen_ai.latency.time_in_model_prefill": repr(prefill_s),
        "gen_ai.latency.time_in_model_decode": repr(decode_s),
        "gen_ai.latency.e2e": repr(e2e),
        "gen_ai.usage.prompt_tokens": "512",
        "gen_ai.usage.completion_tokens": "64",
    }
    return S("llm_request", 0, e2e * 1000, kind="Server", attrs=attrs, service="vllm")


def test_vllm_attributes_become_queue_prefill_and_decode(db_path):
    cols = SpanColumns()
    add_trace(cols, vllm_request(0.020, 0.025, 0.040), 1)
    load(db_path, "vllm", cols)
    row = request_row(db_path, 1)
    assert row["spans"] == 1  # phase spans are not counted as spans
    assert row["queue"] == pytest.approx(20.0, abs=1e-3)
    assert row["model_forward"] == pytest.approx(65.0, abs=1e-3)
    # arrival -> queued (5 ms) and after the last token (10 ms) are not accounted for by vLLM
    assert row["unattributed"] == pytest.approx(15.0, abs=1e-3)
    assert sum(row[c] for c in STAGE_COLUMNS) == pytest.approx(row["duration"], abs=1e-6)


def test_the_timeline_shows_the_phases_in_place(db_path):
    cols = SpanColumns()
    trace_id = add_trace(cols, vllm_request(0.020, 0.025, 0.040), 1)
    load(db_path, "vllm", cols)
    spans = trace_gantt(Store(db_path), trace_id).spans.set_index("name")
    assert spans.loc["queue", "start_offset_ms"] == pytest.approx(5.0, abs=1e-3)
    assert spans.loc["prefill", "start_offset_ms"] == pytest.approx(25.0, abs=1e-3)  # ends at TTFT 50 ms
    assert spans.loc["decode", "start_offset_ms"] == pytest.approx(50.0, abs=1e-3)
    assert spans.loc["decode", "stage"] == "model_forward"


def triton_request(queue_ms: float, infer_ms: float) -> S:
    """One Triton request span with its activity timestamps as events (OpenTelemetry trace mode)."""
    t = {"HTTP_RECV_START": 0.0, "HTTP_RECV_END": 1.0, "REQUEST_START": 1.5, "QUEUE_START": 2.0}
    t["COMPUTE_START"] = t["QUEUE_START"] + queue_ms
    t["COMPUTE_INPUT_END"] = t["COMPUTE_START"] + 0.5
    t["COMPUTE_OUTPUT_START"] = t["COMPUTE_INPUT_END"] + infer_ms
    t["COMPUTE_END"] = t["COMPUTE_OUTPUT_START"] + 0.25
    t["REQUEST_END"] = t["COMPUTE_END"] + 0.25
    t["HTTP_SEND_START"] = t["REQUEST_END"] + 0.5
    t["HTTP_SEND_END"] = t["HTTP_SEND_START"] + 1.0
    events = sorted((ms, name) for name, ms in t.items())
    return S("InferRequest", 0, t["HTTP_SEND_END"], kind="Server", events=events, service="triton")


def test_triton_events_become_stages(db_path):
    cols = SpanColumns()
    add_trace(cols, triton_request(queue_ms=10.0, infer_ms=20.0), 1)
    load(db_path, "triton", cols)
    row = request_row(db_path, 1)
    assert row["ingress"] == pytest.approx(1.0, abs=1e-3)
    assert row["queue"] == pytest.approx(10.0, abs=1e-3)
    assert row["preprocessing"] == pytest.approx(0.5, abs=1e-3)
    assert row["model_forward"] == pytest.approx(20.0, abs=1e-3)
    assert row["postprocessing"] == pytest.approx(0.25, abs=1e-3)
    assert row["serialization"] == pytest.approx(1.0, abs=1e-3)
    assert row["unattributed"] == pytest.approx(1.0 + 0.25 + 0.5, abs=1e-3)  # recv..queue, compute end..send


def test_text_durations_are_parsed_with_their_units(db_path):
    attrs = {
        "validation_time": "1.5ms",
        "queue_time": "20ms",
        "inference_time": "0.03s",
        "total_time": "52ms",
    }
    cols = SpanColumns()
    add_trace(cols, S("generate", 0, 52, kind="Server", attrs=attrs, service="text-generation-inference"), 1)
    add_trace(cols, S("chat", 0, 52, kind="Server", attrs=attrs), 2)  # name rule: not a TGI span
    load(db_path, "tgi", cols)
    row = request_row(db_path, 1)
    assert (row["preprocessing"], row["queue"], row["model_forward"]) == pytest.approx(
        (1.5, 20.0, 30.0), abs=1e-3
    )
    assert request_row(db_path, 2)["unattributed"] == pytest.approx(52.0)


def test_phases_under_a_nested_span_and_the_waterfall(db_path):
    cols = SpanColumns()
    for i in range(50):
        gateway = S(
            "POST /v1/completions",
            0,
            120,
            kind="Server",
            children=[
                S(
                    "vllm call",
                    5,
                    115,
                    kind="Client",
                    children=[vllm_request(0.002 + 0.001 * (i % 5), 0.03, 0.05)],
                ),
            ],
        )
        # the vllm span starts at the trace's start: shift it into the client call
        gateway.children[0].children[0].start += 6
        gateway.children[0].children[0].end += 6
        add_trace(cols, gateway, i + 1, offset_ms=i * 200)
    load(db_path, "gw", cols)
    wf = waterfall(Store(db_path), Filter(run="gw"), "p50")
    stages = {s.stage: s for s in wf.stages}
    assert stages["model_forward"].mean_ms == pytest.approx(80.0, abs=0.01)
    assert stages["queue"].mean_ms == pytest.approx(4.0, abs=0.01)
    mapping = stage_mapping(Store(db_path), run="gw")
    prefill = mapping[mapping["span_name"] == "prefill"].iloc[0]
    assert prefill["stage"] == "model_forward"
    assert "phase rule" in prefill["rule"] and "vLLM" in prefill["rule"]


def test_editing_the_phase_rules_rederives(db_path):
    cols = SpanColumns()
    add_trace(cols, vllm_request(0.020, 0.025, 0.040), 1)
    load(db_path, "vllm", cols)
    custom = [
        PhaseRule(
            1, "mine", "wait", "feature_hydration", "attribute", "gen_ai.latency.time_in_queue", unit="s"
        )
    ]
    with connect_writer(db_path) as conn:
        with pytest.raises(ValueError, match="unit 'fortnights'"):
            replace_phase_rules(conn, [PhaseRule(1, "x", "y", "queue", "attribute", "k", unit="fortnights")])
        replace_phase_rules(conn, custom)
    row = request_row(db_path, 1)
    assert row["feature_hydration"] == pytest.approx(20.0, abs=1e-3)
    assert row["queue"] == 0 and row["model_forward"] == 0
    with connect_reader(db_path) as conn:
        assert [r.phase for r in phase_rules_in_force(conn)] == ["wait"]


def test_a_store_derived_before_phase_rules_is_rederived_by_the_next_writer(db_path):
    cols = SpanColumns()
    add_trace(cols, vllm_request(0.020, 0.025, 0.040), 1)
    load(db_path, "vllm", cols)
    with connect_writer(db_path) as conn:  # as a store from before: no phase rules, stale rows
        conn.execute("DELETE FROM phase_rules")
        conn.execute("UPDATE requests SET queue_ns = 0, model_forward_ns = 0, unattributed_ns = Duration")
    more = SpanColumns()
    add_trace(more, vllm_request(0.010, 0.025, 0.040), 2)
    load(db_path, "other", more)
    assert request_row(db_path, 1)["queue"] == pytest.approx(20.0, abs=1e-3)
    with connect_reader(db_path) as conn:
        assert len(phase_rules_in_force(conn)) == len(default_phase_rules())


def triton_otel_request(output_start_ms: float = 33) -> S:
    """Triton's OpenTelemetry mode: a top-level span (HTTP timestamps), a model span (REQUEST_START,
    QUEUE_START, REQUEST_END) and its compute span (COMPUTE_* timestamps)."""
    compute = S(
        "compute",
        12,
        35,
        events=[
            (12, "COMPUTE_START"),
            (13, "COMPUTE_INPUT_END"),
            (output_start_ms, "COMPUTE_OUTPUT_START"),
            (35, "COMPUTE_END"),
        ],
    )
    model = S(
        "resnet50",
        1.5,
        36,
        children=[compute],
        events=[(1.5, "REQUEST_START"), (2, "QUEUE_START"), (36, "REQUEST_END")],
    )
    return S(
        "InferRequest",
        0,
        40,
        kind="Server",
        children=[model],
        events=[(0, "HTTP_RECV_START"), (1, "HTTP_RECV_END"), (37, "HTTP_SEND_START"), (39, "HTTP_SEND_END")],
    )


def test_triton_three_span_shape_queue_ends_at_the_compute_childs_start(db_path):
    """Triton's OpenTelemetry mode (triton_otel_request): the queue ends where the compute child starts."""
    top = triton_otel_request()
    cols = SpanColumns()
    add_trace(cols, top, 1)
    load(db_path, "triton", cols)
    row = request_row(db_path, 1)
    assert row["spans"] == 3
    assert row["queue"] == pytest.approx(10.0, abs=1e-3)
    assert (row["preprocessing"], row["model_forward"], row["postprocessing"]) == pytest.approx(
        (1, 20, 2), abs=1e-3
    )
    assert (row["ingress"], row["serialization"]) == pytest.approx((1, 2), abs=1e-3)
    # not accounted for by Triton: 1..2 ms before the queue, 35..37 and 39..40 ms around the send
    assert row["unattributed"] == pytest.approx(1 + 2 + 1, abs=1e-3)


def test_a_phase_fills_only_the_time_its_spans_children_do_not_cover(db_path):
    """TGI's generate span reports validation/queue/inference durations, and its children (validate,
    queued, infer) cover the same time: the children say what that time is, the phases only fill what
    no child covers (here 1 ms between validation and the queue)."""
    attrs = {"validation_time": "2ms", "queue_time": "11ms", "inference_time": "30ms"}
    generate = S(
        "generate",
        0,
        43,
        attrs=attrs,
        children=[S("validate", 0, 2), S("queued", 3, 13), S("infer", 13, 21), S("infer", 21, 43)],
    )
    cols = SpanColumns()
    add_trace(cols, S("POST /generate", 0, 44, kind="Server", children=[generate]), 1)
    load(db_path, "tgi", cols)
    row = request_row(db_path, 1)
    assert row["parsing"] == pytest.approx(2.0, abs=1e-3)  # the validate child, by name
    assert row["queue"] == pytest.approx(
        10.0 + 1.0, abs=1e-3
    )  # queued child + the uncovered 2..3 ms of the queue phase
    assert row["model_forward"] == pytest.approx(30.0, abs=1e-3)
    assert row["preprocessing"] == 0


def test_a_phase_rules_key_is_matched_as_written_not_as_a_pattern(db_path):
    """The candidate filter is one regex of the rules' keys (statements.phase_candidates): a key's
    regex metacharacters match only themselves."""
    cols = SpanColumns()
    add_trace(cols, S("handle", 0, 100, kind="Server", attrs={"srv.time(q)": "20"}), 1)
    add_trace(cols, S("handle", 0, 100, kind="Server", attrs={"srvXtime(q)": "20"}), 2)
    add_trace(cols, S("handle", 0, 100, kind="Server", attrs={"srv.timeq": "20"}), 3)
    load(db_path, "keys", cols)
    with connect_writer(db_path) as conn:
        rule = PhaseRule(1, "mine", "wait", "queue", "attribute", "srv.time(q)", unit="ms")
        replace_phase_rules(conn, [rule])
    assert request_row(db_path, 1)["queue"] == pytest.approx(20.0, abs=1e-3)
    assert request_row(db_path, 2)["queue"] == 0
    assert request_row(db_path, 3)["queue"] == 0
