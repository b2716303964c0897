"""The span tree's cheaper statements write what the statements before them wrote (issue 29: a store's
first stage-rule edit derives every run from its spans at ~9 µs of CPU per span, ~880 s at 100 M).

Every run of a store is derived from its spans keeping its path rows (as that edit does), once with
the shipped SQL and once with the text as it was at main 2da025a (tests/golden/*_before.sql, read in
place of the shipped file), and every derived table is compared column by column: `requests`, the kept
path rows with their PathIds, the path nodes, the per-run histograms, derive_state. The runs: parallel
and overlapping children (the sweep), nested SERVER tiers, phase spans, and traces with a missing
parent, children that start before or end after their parent (clock skew), a CLIENT root handing over
to a SERVER child, repeated span ids and a trace with no root."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from analysis_spans import S, SpanColumns, add_rootless_trace, add_trace, load
from test_rule_remap import loaded

from tailscope import sql
from tailscope.store.duckdb import derive, statements
from tailscope.store.duckdb.connection import connect_writer

GOLDEN = Path(__file__).parent / "golden"
# statement name -> its text before (the shipped one is compared with it)
BEFORE = {"span_tree_paths": GOLDEN / "span_tree_paths_before.sql"}

TABLES = {
    "requests": "SELECT * FROM requests ORDER BY ALL",
    "request_paths": "SELECT * FROM request_paths ORDER BY ALL",
    "span_paths": "SELECT * FROM span_paths ORDER BY ALL",
    "request_histogram": "SELECT * FROM request_histogram ORDER BY ALL",
    "stage_histogram": "SELECT * FROM stage_histogram ORDER BY ALL",
    "derive_state": "SELECT * FROM derive_state ORDER BY ALL",
}


@pytest.fixture(autouse=True)
def every_request_keeps_span_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """SpanTimes for every request (the derive keeps them for 1/16), so that they are compared too."""
    monkeypatch.setattr(statements, "SPAN_TIMES_MAX_HASH", 2**64 - 1)


def odd_traces(cols: SpanColumns) -> None:
    """Traces whose trees are not clean: a missing parent, clock skew, a client root, repeated ids."""
    for n in range(30):
        skewed = S(
            "POST /score",
            0,
            40 + n % 4,
            kind="Server",
            children=[
                S("tokenize", -3, 6),  # starts before its parent (another host's clock)
                S("model.forward", 5, 35 + n % 4, children=[S("kernel", 6, 20), S("kernel", 15, 34)]),
                S("serialize", 36, 47 + n % 4, stage="serialization"),  # ends after its parent
            ],
        )
        add_trace(cols, skewed, 7000 + n, offset_ms=n * 100.0)
        # a subtree whose parent never arrived: its own root, the longest of the trace's roots or not
        orphan = S("features.fetch", 2, 12 + n % 3, children=[S("redis.get", 3, 9, kind="Client")])
        add_trace(cols, orphan, 7000 + n, offset_ms=n * 100.0, parent=f"{0xDEAD0000 + n:016x}")
        client = S(
            "GET /rank",
            0,
            30,
            kind="Client",
            children=[S("GET /rank", 1, 29, kind="Server", children=[S("model.forward", 2, 27)])],
        )
        add_trace(cols, client, 8000 + n, offset_ms=n * 100.0 + 50)
    add_rootless_trace(cols)
    repeated = SpanColumns()  # the same span ids twice in one trace (a retrying exporter)
    add_trace(repeated, S("POST /again", 0, 20, kind="Server", children=[S("model.forward", 2, 18)]), 9000)
    table = repeated.to_arrow()
    for _ in range(2):
        for row in table.to_pylist():
            cols.append(
                timestamp_ns=row["Timestamp"].value,
                trace_id=row["TraceId"],
                span_id=row["SpanId"],
                parent_span_id=row["ParentSpanId"],
                span_name=row["SpanName"],
                duration_ns=row["Duration"],
                service_name=row["ServiceName"],
                span_kind=row["SpanKind"],
            )


@pytest.fixture(scope="module")
def spans_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("same") / "store.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(statements, "SPAN_TIMES_MAX_HASH", 2**64 - 1)
        loaded(path)
        cols = SpanColumns()
        odd_traces(cols)
        load(path, "odd", cols)
    return path


def derived(store: Path, copy: Path, before: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple]]:
    """Every run of a copy of `store` derived from its spans keeping its paths; the derived tables."""
    shutil.copyfile(store, copy)
    shipped = sql.load
    with monkeypatch.context() as patch:
        if before:
            patch.setattr(
                sql, "load", lambda name, *a: BEFORE[name].read_text() if name in BEFORE else shipped(name, *a)
            )
        with connect_writer(copy) as conn:
            derive.rederive_after(conn, lambda: None, refresh=lambda c, p: derive.refresh_all(c, p, keep_paths=True))
            return {name: conn.execute(text).fetchall() for name, text in TABLES.items()}


def test_the_store_has_what_the_comparison_needs(spans_store: Path, tmp_path: Path, monkeypatch) -> None:
    """Overlapping children (concurrent traces), tiers, phase spans, a client root, orphans."""
    tables = derived(spans_store, tmp_path / "a.duckdb", False, monkeypatch)
    with connect_writer(tmp_path / "a.duckdb") as conn:
        runs = dict(conn.execute("SELECT RunLabel, count(*) FROM requests GROUP BY ALL").fetchall())
        client = conn.execute("SELECT count(*) FROM requests WHERE ClientDuration IS NOT NULL").fetchone()[0]
    assert set(runs) == {"par", "weighted", "llm", "tiers", "odd"}
    assert runs["odd"] == 30 + 30 + 1  # the skewed traces, the client roots, one request of repeated ids
    assert client >= 30
    assert len(tables["span_paths"]) > 20 and len(tables["request_paths"]) > 1000


def test_a_derive_keeping_paths_writes_what_the_statements_before_wrote(
    spans_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = derived(spans_store, tmp_path / "now.duckdb", False, monkeypatch)
    before = derived(spans_store, tmp_path / "before.duckdb", True, monkeypatch)
    for name in TABLES:
        assert now[name] == before[name], name
    for name, path in BEFORE.items():  # the comparison compared something: the texts differ
        assert sql.load(name) != path.read_text()
