"""refresh_run on small hand-built traces with known answers (times in ms, stored in ns)."""

from __future__ import annotations

import duckdb
import pytest
from analysis_spans import S, SpanColumns, add_rootless_trace, add_trace, insert, load

from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run
from tailscope.vocabulary import ALL_STAGES

STAGE_COLUMNS = [f"{stage}_ns" for stage in ALL_STAGES]


def requests_of(path, run="r"):
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute("SELECT * FROM requests WHERE RunLabel = ? ORDER BY TraceId", [run]).df()


def stage_ms(row) -> dict[str, float]:
    return {c[:-3]: row[c] / 1e6 for c in STAGE_COLUMNS if row[c]}


def test_two_parallel_children_are_not_double_counted(db_path):
    # given a root of 100 ms with two children running in parallel over 20..60
    cols = SpanColumns()
    add_trace(
        cols,
        S(
            "root",
            0,
            100,
            kind="Server",
            children=[S("a", 20, 60, stage="model_forward"), S("b", 20, 60, stage="model_forward")],
        ),
        1,
    )
    # when derived
    load(db_path, "r", cols)
    row = requests_of(db_path).iloc[0]
    # then the 40 ms of parallel work count once, and the root keeps 60 ms of its own
    assert stage_ms(row) == {"model_forward": 40.0, "unattributed": 60.0}
    assert sum(row[c] for c in STAGE_COLUMNS) == row["Duration"]


def test_overlapping_children_of_different_stages_share_the_overlap(db_path):
    cols = SpanColumns()
    add_trace(
        cols,
        S(
            "root",
            0,
            100,
            kind="Server",
            children=[S("a", 10, 50, stage="model_forward"), S("b", 30, 70, stage="downstream")],
        ),
        1,
    )
    load(db_path, "r", cols)
    row = requests_of(db_path).iloc[0]
    # 10..30 model alone, 30..50 shared evenly, 50..70 downstream alone
    assert stage_ms(row) == {"model_forward": 30.0, "downstream": 30.0, "unattributed": 40.0}


def test_children_that_outlast_the_parent_are_clipped(db_path):
    cols = SpanColumns()
    add_trace(
        cols,
        S(
            "root",
            0,
            100,
            kind="Server",
            children=[
                S("q", 0, 40, stage="queue", children=[S("late", 30, 150, stage="downstream")]),
                S("f", 40, 130, stage="model_forward"),
            ],
        ),
        1,
    )
    load(db_path, "r", cols)
    row = requests_of(db_path).iloc[0]
    assert stage_ms(row) == {"queue": 30.0, "downstream": 10.0, "model_forward": 60.0}
    assert row["Duration"] == 100_000_000


def test_client_root_hands_the_request_to_its_server_child(db_path):
    cols = SpanColumns()
    server = S("POST /v1/predict", 0, 80, kind="Server", service="api", children=[S("model.forward", 10, 70)])
    add_trace(cols, S("POST /v1/predict", -5, 90, kind="Client", service="loadgen", children=[server]), 1)
    load(db_path, "r", cols)
    row = requests_of(db_path).iloc[0]
    assert row["ServiceName"] == "api"
    assert row["Duration"] == 80_000_000
    assert row["ClientDuration"] == 95_000_000
    assert stage_ms(row) == {"model_forward": 60.0, "unattributed": 20.0}


def test_unmatched_child_of_the_root_is_unattributed_and_grandchildren_inherit(db_path):
    cols = SpanColumns()
    add_trace(
        cols,
        S(
            "root",
            0,
            50,
            kind="Server",
            children=[S("mystery", 0, 10), S("model.forward", 10, 40, children=[S("aten::matmul", 15, 25)])],
        ),
        1,
    )
    load(db_path, "r", cols)
    row = requests_of(db_path).iloc[0]
    assert stage_ms(row) == {"model_forward": 30.0, "unattributed": 20.0}


def test_run_without_root_spans_gives_no_requests(db_path):
    cols = SpanColumns()
    add_rootless_trace(cols)
    load(db_path, "r", cols)
    assert requests_of(db_path).empty


def test_refresh_is_incremental_and_matches_a_full_rebuild(db_path):
    first, second = SpanColumns(), SpanColumns()
    for i in range(10):
        add_trace(first, S("root", 0, 20 + i, kind="Server", children=[S("parse", 0, 5)]), i + 1)
    for i in range(10, 12):
        add_trace(second, S("root", 0, 20 + i, kind="Server", children=[S("parse", 0, 5)]), i + 1)
    load(db_path, "r", first)
    with connect_writer(db_path) as conn:
        insert(conn, "r", second)
        refresh_run(conn, "r")
        incremental = conn.execute("SELECT * FROM requests ORDER BY TraceId").fetchall()
        conn.execute("DELETE FROM derive_state")
        refresh_run(conn, "r")
        full = conn.execute("SELECT * FROM requests ORDER BY TraceId").fetchall()
    assert len(incremental) == 12
    assert incremental == full


@pytest.mark.parametrize("n_traces", [1, 7])
def test_stage_columns_add_up_to_duration(db_path, n_traces):
    cols = SpanColumns()
    for i in range(n_traces):
        add_trace(
            cols,
            S(
                "root",
                0,
                100 + i,
                kind="Server",
                children=[
                    S("tokenize", 1, 30 + i),
                    S("forward", 20, 90),
                    S("serialize", 85, 99 + i, children=[S("encode", 80, 120)]),
                ],
            ),
            i + 1,
        )
    load(db_path, "r", cols)
    frame = requests_of(db_path)
    assert (frame[STAGE_COLUMNS].sum(axis=1) == frame["Duration"]).all()


@pytest.mark.slow
def test_real_world_corpus_derives_consistent_requests_and_every_view_answers(corpus_dir, db_path):
    from ingest.loader import load_paths
    from tailscope.analysis import Filter, overview, slowest_traces, stage_mapping, trace_gantt, waterfall
    from tailscope.store.duckdb.store import DuckDBStore as Store

    files = sorted(
        p for p in corpus_dir.rglob("*") if p.is_file() and p.suffix != ".md" and p.name != "manifest.json"
    )
    for number, path in enumerate(files):
        load_paths([path], db_path, f"corpus-{number}", skip_bad=True)
    store = Store(db_path)
    with duckdb.connect(str(db_path), read_only=True) as conn:
        frame = conn.execute("SELECT * FROM requests").df()
        runs = [r[0] for r in conn.execute("SELECT DISTINCT RunLabel FROM otel_traces").fetchall()]
    assert len(frame) > 0
    assert (frame[STAGE_COLUMNS].sum(axis=1) == frame["Duration"].clip(lower=0)).all()
    assert (frame[STAGE_COLUMNS] >= 0).all().all()
    for run in runs:
        flt = Filter(run=run)
        assert overview(store, flt).runs or overview(store, flt).reason
        result = waterfall(store, flt, "p99")
        assert result.stages or result.reason
        slow = slowest_traces(store, flt, 1)
        if not slow.empty:
            gantt = trace_gantt(store, slow["trace_id"][0], run)
            assert gantt.reason is None and not gantt.spans.empty
        assert not stage_mapping(store, run).empty or slow.empty


def _longest_in_state(conn) -> int | None:
    return conn.execute("SELECT LongestNs FROM derive_state WHERE RunLabel = 'r'").fetchone()[0]


def test_a_flush_knows_the_runs_longest_request_without_scanning_its_requests(db_path, monkeypatch):
    # each flush needs the run's longest request (how far its traces' spans can start apart): kept
    # in derive_state by every derive, so a flush into a long run does not scan its requests for it
    from tailscope import sql
    from tailscope.store.duckdb import derive

    first = SpanColumns()
    for i in range(10):
        add_trace(
            first, S("root", 0, 20 + i, kind="Server", children=[S("parse", 0, 5)]), i + 1, offset_ms=i * 50
        )
    load(db_path, "r", first)
    with connect_writer(db_path) as conn:
        assert _longest_in_state(conn) == 29_000_000  # a full derive: exact
        loaded: list[str] = []
        original = sql.load
        monkeypatch.setattr(derive.sql, "load", lambda name, *a: loaded.append(name) or original(name, *a))
        later = SpanColumns()
        add_trace(later, S("root", 0, 100, kind="Server", children=[S("parse", 0, 5)]), 11, offset_ms=600)
        insert(conn, "r", later)
        touched = later.to_arrow().select(["TraceId"])
        start = int(later.to_arrow().column("Timestamp")[0].value)
        refresh_run(conn, "r", touched, 2, (start, start, 100_000_000))
        assert "derive_longest_request" not in loaded  # known from derive_state
        assert _longest_in_state(conn) == 100_000_000  # the flush's longer request kept
        assert len(conn.execute("SELECT * FROM requests").fetchall()) == 11
    # a store derived before the column existed: scanned once, then known
    with connect_writer(db_path) as conn:
        conn.execute("ALTER TABLE derive_state DROP COLUMN LongestNs")
    with connect_writer(db_path) as conn:
        assert _longest_in_state(conn) is None
        assert derive.longest_request(conn, "r") == 100_000_000


def test_a_new_stores_first_run_is_derived_once(db_path, monkeypatch):
    # a new store seeds the phase rules on its first derive; that derives every run with them, the
    # run being written included, and must not derive that run a second time (as the loader's
    # refresh, naming the traces it touched, did: twice the derive of a new store's first file)
    from tailscope.store.duckdb import derive
    from tailscope.store.duckdb.writer import store_batches

    spans = SpanColumns()
    for i in range(5):
        add_trace(spans, S("root", 0, 20 + i, kind="Server", children=[S("parse", 0, 5)]), i + 1)
    derived: list[str] = []
    original = derive._derive

    def counted(conn, run, *args, **kwargs):
        derived.append(run)
        return original(conn, run, *args, **kwargs)

    monkeypatch.setattr(derive, "_derive", counted)
    with connect_writer(db_path) as conn:
        conn.begin()
        store_batches(conn, "r", [spans], ["spans.jsonl"])
        conn.commit()
    assert derived == ["r"]
    assert len(requests_of(db_path)) == 5
