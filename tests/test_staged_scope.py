"""The span-tree statements read a scope four times; the DuckDB engine stages the scope's spans once,
so a Gantt, a stage breakdown, the stage mapping and each part of a derive read otel_traces once
for their spans (at 10 M spans: the stage breakdown 3.4 s → 0.9 s, bench/RESULTS.md "Scale")."""

from __future__ import annotations

from pathlib import Path

from analysis_spans import S, SpanColumns, add_trace, load

from tailscope.analysis import Filter, stage_breakdown, trace_gantt
from tailscope.store.duckdb.connection import connect_reader, connect_writer
from tailscope.store.duckdb.reader import DuckDBReader


class CountingConnection:
    """A DuckDB connection that counts the statements reading otel_traces."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.reads = 0
        self.texts: list[str] = []

    def execute(self, text: str, *params):
        self.reads += text.count("FROM otel_traces")
        self.texts.append(text)
        return self.conn.execute(text, *params)

    def __getattr__(self, name: str):
        return getattr(self.conn, name)


def store(db_path: Path) -> None:
    cols = SpanColumns()
    for n in range(1, 41):
        slow = 80 if n % 10 == 0 else 5
        root = S(
            "POST /predict",
            0,
            20 + slow,
            kind="Server",
            children=[S("parse", 0, 2), S("model.forward", 2, 18 + slow)],
        )
        add_trace(cols, S("client", -1, 22 + slow, kind="Client", children=[root]), n)
    load(db_path, "r", cols)


def test_a_gantt_reads_the_runs_spans_once_for_its_tree(db_path: Path) -> None:
    store(db_path)
    with connect_reader(db_path) as conn:
        counting = CountingConnection(conn)
        gantt = trace_gantt(DuckDBReader(counting), f"{10:032x}", "r")
    assert gantt.reason is None and len(gantt.spans) == 4  # client, root, parse, forward
    assert gantt.client_duration_ms is not None
    assert counting.reads == 2  # the staged spans, the percentile ranks among the run's spans


def test_a_stage_breakdown_reads_the_runs_spans_once_where_it_reads_them(db_path: Path) -> None:
    store(db_path)
    with connect_writer(db_path) as conn:  # rows derived before requests.SpanTimes (test_span_times.py)
        conn.execute("UPDATE requests SET SpanTimes = NULL")
    with connect_reader(db_path) as conn:
        counting = CountingConnection(conn)
        table = stage_breakdown(DuckDBReader(counting), Filter(run="r"), "p99")
    assert not table.empty and "model.forward" in set(table["span_name"])
    assert counting.reads == 1


def test_a_gantt_reads_the_spans_within_its_requests_time_skewed_ones_included(db_path: Path) -> None:
    """The Gantt finds the trace's spans within its request's interval (± clock skew), so DuckDB
    skips the run's other row groups by their Timestamp min/max instead of scanning every TraceId."""
    cols = SpanColumns()
    for n in range(1, 6):
        root = S(
            "POST /predict",
            0,
            30,
            kind="Server",
            children=[S("early clock", -2000, 1), S("model.forward", 2, 28)],
        )
        add_trace(cols, root, n, offset_ms=60_000.0 * n)
    load(db_path, "r", cols)
    with connect_reader(db_path) as conn:
        counting = CountingConnection(conn)
        gantt = trace_gantt(DuckDBReader(counting), f"{3:032x}", "r")
    assert set(gantt.spans["name"]) == {"POST /predict", "early clock", "model.forward"}
    staging = [text for text in counting.texts if "_ts_scope_spans AS" in text]
    assert len(staging) == 1 and "Timestamp BETWEEN" in staging[0]
