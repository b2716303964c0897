"""Two tiers in one trace: a gateway whose request is almost all one call into a model server.

The model server's SERVER span is nested under the gateway's CLIENT call. Its own time not covered
by its children (here a 40 ms batch wait with no span of its own) is mapped like the request root's
own time, unattributed, not by the span's name into model_forward; what its children cover keeps
their stages. The diagnosis sees the same: it takes that span as the request of a proxy tier."""

from __future__ import annotations

import pytest
from analysis_spans import S, SpanColumns, add_trace, load
from run_cache import cached, copy_store

from tailscope.analysis import Filter, stage_mapping, waterfall
from tailscope.analysis.diagnosis.frame import KIND_SERVER
from tailscope.store.duckdb.connection import connect_reader
from tailscope.store.duckdb.reader import DuckDBReader
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.vocabulary import ALL_STAGES

STAGE_COLUMNS = ("ingress", "queue", "preprocessing", "model_forward", "downstream", "unattributed")


def gateway_trace(forward_ms: float) -> S:
    """gateway 0-100 (forward 45 ms): call 2-97: model server 'POST /v1/infer' 2.5-96.5 → tokenize 4 ms,
    (batch wait 40 ms), forward, then 5 ms answering."""
    end = 51.5 + forward_ms
    return S("POST /predict", 0, end + 3.5, kind="Server", service="gateway", children=[
        S("POST /v1/infer", 2, end + 0.5, kind="Client", service="gateway",
          attrs={"http.request.method": "POST", "server.address": "model"}, children=[
            S("POST /v1/infer", 2.5, end, kind="Server", service="model-server", children=[
                S("tokenize", 2.5, 6.5, service="model-server"),
                S("model.forward", 46.5, 46.5 + forward_ms, service="model-server"),
            ]),
        ]),
    ])  # fmt: skip


def request_row(db, trace_no: int) -> dict[str, float]:
    with connect_reader(db) as conn:
        cols = ", ".join(f"{c}_ns" for c in STAGE_COLUMNS)
        row = conn.execute(
            f"SELECT Duration, {cols} FROM requests WHERE TraceId = ?", [f"{trace_no:032x}"]
        ).fetchone()
    return {"duration": row[0] / 1e6} | {c: v / 1e6 for c, v in zip(STAGE_COLUMNS, row[1:], strict=True)}


def _two_tier(db_path) -> None:
    cols = SpanColumns()
    for i in range(200):
        add_trace(cols, gateway_trace(45.0 + (i % 10)), i + 1, offset_ms=i * 200)
    load(db_path, "tiers", cols)


@pytest.fixture
def two_tier(db_path, tmp_path_factory):
    """200 gateway traces, built once per session (tests/run_cache.py), a copy of the store per test."""
    entry = cached(tmp_path_factory, "two_tier", (), lambda folder: _two_tier(folder / "store.duckdb"))
    return copy_store(entry, "store.duckdb", db_path)


def test_the_model_servers_own_time_is_unattributed_not_model_forward(two_tier):
    row = request_row(two_tier, 1)  # forward 45 ms
    assert row["model_forward"] == pytest.approx(45.0)
    assert row["preprocessing"] == pytest.approx(4.0)
    assert row["downstream"] == pytest.approx(1.0)  # the gateway's call outside the server's span
    # the gateway's own 5 ms and the model server's own 45 ms (40 ms batch wait + 5 ms answering)
    assert row["unattributed"] == pytest.approx(5.0 + 45.0)
    assert row["ingress"] == 0 and row["queue"] == 0
    assert sum(row[c] for c in STAGE_COLUMNS) == pytest.approx(row["duration"])


def test_the_waterfall_and_the_mapping_say_so(two_tier):
    store = Store(two_tier)
    stages = {s.stage: s.mean_ms for s in waterfall(store, Filter(run="tiers"), "p50").stages}
    assert stages["model_forward"] < 55 and stages["unattributed"] == pytest.approx(50.0)
    mapping = stage_mapping(store, "tiers")
    server = mapping[(mapping.span_kind == "Server") & (mapping.span_name == "POST /v1/infer")]
    assert server.stage.tolist() == ["ingress"]
    assert "nested SERVER span" in server.rule.iloc[0]


def test_a_leaf_server_span_and_an_explicit_stage_keep_their_mapping(db_path):
    """A SERVER span without children is an untraced dependency: all its time is its work, mapped by
    the rules (here inherited from the call: downstream). tailscope.stage always wins."""
    cols = SpanColumns()
    add_trace(cols, S("POST /predict", 0, 50, kind="Server", children=[
        S("POST /enrich", 5, 25, kind="Client", attrs={"http.request.method": "POST"}, children=[
            S("enrich", 6, 24, kind="Server", service="enricher"),
        ]),
        S("POST /v1/infer", 25, 48, kind="Server", service="model", stage="model_forward", children=[
            S("tokenize", 25, 27, service="model"),
        ]),
    ]), 1)  # fmt: skip
    load(db_path, "leaf", cols)
    row = request_row(db_path, 1)
    assert row["downstream"] == pytest.approx(20.0)
    assert row["model_forward"] == pytest.approx(21.0) and row["preprocessing"] == pytest.approx(2.0)
    assert row["unattributed"] == pytest.approx(7.0)


def test_the_diagnosis_takes_the_model_server_span_as_the_request(two_tier):
    from tailscope.analysis.diagnosis.load import load_frame

    with connect_reader(two_tier) as conn:
        frame = load_frame(DuckDBReader(conn), "tiers")
    roots = frame.requests.root
    assert len(roots) == 200
    assert {(frame.names[frame.name[r]], frame.kind[r]) for r in roots} == {("POST /v1/infer", KIND_SERVER)}
    assert {ALL_STAGES[frame.stage[r]] for r in roots} == {"ingress"}  # as the waterfall maps it


def orchestrator_trace(miss: bool, llm_ms: float) -> S:
    """An orchestrator that embeds the question (its longest call, 7 of its 10 ms), looks it up in a cache
    (an untraced redis call), and only on a miss calls an LLM server that takes the rest."""
    calls = [
        S("POST", 1, 8, kind="Client", service="orchestrator", children=[
            S("POST /embed", 1.5, 7.5, kind="Server", service="embedder", children=[
                S("inference", 2, 7, service="embedder"),
            ]),
        ]),
        S("FT.SEARCH", 8, 9.5, kind="Client", service="orchestrator", attrs={"db.system": "redis"}),
    ]
    end = 10.0
    if miss:
        calls.append(S("llm.chat", 10, 10 + llm_ms, kind="Client", service="orchestrator", children=[
            S("llm_request", 10.5, 9.5 + llm_ms, kind="Server", service="llm"),
        ]))
        end = 11 + llm_ms
    return S("POST /v1/chat", 0, end, kind="Server", service="orchestrator", children=calls)  # fmt: skip


def test_an_orchestrator_whose_longest_call_changes_by_request_keeps_the_request(db_path):
    """Its longest call covers most of its median request (the embedder's, on a cache hit) and its tail
    is one callee's (the LLM's, on a miss), but the callee changes from request to request: the
    request is the orchestrator's own, not a forward to whichever service it called longest."""
    from tailscope.analysis.diagnosis.load import load_frame

    cols = SpanColumns()
    for i in range(300):
        add_trace(cols, orchestrator_trace(i % 3 == 0, 500.0 + 7 * (i % 200)), i + 1, offset_ms=i * 50)
    load(db_path, "orchestrator", cols)
    with connect_reader(db_path) as conn:
        frame = load_frame(DuckDBReader(conn), "orchestrator")
    roots = frame.requests.root
    assert len(roots) == 300
    assert {frame.names[frame.name[r]] for r in roots} == {"POST /v1/chat"}


def service_trace(queued_ms: float) -> S:
    """A service doing work of its own between calls to three untraced dependencies (a rate limiter, an
    object store, a database) and one traced model server, whose batch queue (`queued_ms`) in a surge
    holds most of the request's tail."""
    infer_end = 40 + queued_ms
    return S("POST /v1/moderate", 0, infer_end + 14, kind="Server", service="gateway", children=[
        S("EVALSHA", 0.5, 1.5, kind="Client", service="gateway", attrs={"db.system": "redis"}),
        S("S3.GetObject", 2, 14, kind="Client", service="gateway", attrs={"rpc.system": "aws-api"}),
        S("image.Decode", 14, 30, service="gateway"),
        S("ModelInfer", 30, infer_end, kind="Client", service="gateway", children=[
            S("moderation_ensemble", 30.5, infer_end - 0.5, kind="Server", service="triton", children=[
                S("queue", 31, 31 + queued_ms, service="triton"),
                S("compute_infer", 31 + queued_ms, infer_end - 1, service="triton"),
            ]),
        ]),
        S("BEGIN", infer_end + 1, infer_end + 3, kind="Client", service="gateway",
          attrs={"db.system": "postgresql"}),
        S("COMMIT", infer_end + 4, infer_end + 12, kind="Client", service="gateway",
          attrs={"db.system": "postgresql"}),
    ])  # fmt: skip


def test_a_service_calling_several_dependencies_keeps_the_request_when_one_callee_holds_the_tail(db_path):
    """Its call into the traced model server carries most of the tail excess (a queue in a surge), but
    the service calls three other dependencies and works between them: it is no proxy tier, and its
    request stays its own, as in a run without the surge."""
    from tailscope.analysis.diagnosis.load import load_frame

    cols = SpanColumns()
    for i in range(300):
        add_trace(cols, service_trace(2.0 + (400.0 if i % 10 == 0 else i % 5)), i + 1, offset_ms=i * 50)
    load(db_path, "surge", cols)
    with connect_reader(db_path) as conn:
        frame = load_frame(DuckDBReader(conn), "surge")
    roots = frame.requests.root
    assert len(roots) == 300
    assert {frame.names[frame.name[r]] for r in roots} == {"POST /v1/moderate"}
