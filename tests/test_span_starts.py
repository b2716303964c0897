"""requests.SpanStarts (schema version 6): each request's spans' start times, kept by the derive, where
tail vs body's hash sample finds a sampled trace's spans (tail_attributes.sql) instead of probing
every span's TraceId of the run.

tests/fixtures/store_v5.duckdb.gz was written by tailscope at commit e41ac6d (schema version 5, the
code on main before this column), with that checkout's own venv and no PYTHONPATH:

    tailscope pipeline simulate --scenario gc-pressure --requests 300 --out gc.json --db v5.duckdb \
        --run-label gc                                    # 3,900 spans, 300 requests, 3 instances
    python bench/gen_otlp.py --spans 3000 --per-request 30 --out gen.jsonl
    tailscope ingest gen.jsonl --db v5.duckdb --run gen   # 3,000 spans, 345 requests
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from tailscope.analysis import Filter, tail_vs_body
from tailscope.cli.main import main
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_all
from tailscope.store.duckdb.store import DuckDBStore

FIXTURE = Path(__file__).parent / "fixtures" / "store_v5.duckdb.gz"

# every table a version-5 store holds, in a fixed order (requests without the new column)
TABLES = {
    "otel_traces": "SELECT * FROM otel_traces ORDER BY ALL",
    "runs": "SELECT * FROM runs ORDER BY RunLabel",
    "stage_rules": "SELECT * FROM stage_rules ORDER BY position",
    "phase_rules": "SELECT * FROM phase_rules ORDER BY position",
    "requests": "SELECT COLUMNS(lambda c: c <> 'SpanStarts') FROM requests ORDER BY RunLabel, TraceId",
    "derive_state": "SELECT * FROM derive_state ORDER BY RunLabel",
    "request_histogram": "SELECT * FROM request_histogram ORDER BY ALL",
    "stage_histogram": "SELECT * FROM stage_histogram ORDER BY ALL",
    "span_histogram": "SELECT * FROM span_histogram ORDER BY ALL",
    "heatmap_histogram": "SELECT * FROM heatmap_histogram ORDER BY ALL",
}
# what each request's SpanStarts must be: the sorted distinct starts of its trace's spans in its run
TRUTH = """
SELECT r.RunLabel, r.TraceId, r.SpanStarts,
       (SELECT list_sort(list(DISTINCT epoch_ns(o.Timestamp))) FROM otel_traces AS o
        WHERE o.RunLabel = r.RunLabel AND o.TraceId = r.TraceId) AS truth
FROM requests AS r ORDER BY r.RunLabel, r.TraceId
"""
# selections whose sample is every request of the side, or part of it (sample=40)
CASES = [
    (Filter(run="gc"), 1000),
    (Filter(run="gc"), 40),
    (Filter(run="gc", instance="fd1c6bfd-7297-4440-ab81-607e6c68a7fb"), 1000),
    (Filter(run="gen"), 40),
    (Filter(), 1000),
]


@pytest.fixture
def v5_store(tmp_path: Path) -> Path:
    path = tmp_path / "v5.duckdb"
    with gzip.open(FIXTURE, "rb") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def rows(path: Path, text: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute(text).fetchall()


def answers(path: Path) -> list[tuple[int, int, pd.DataFrame]]:
    store = DuckDBStore(path)
    out = []
    for flt, sample in CASES:
        got = tail_vs_body(store, flt, tail_quantile=0.9, sample=sample, limit=10_000)
        out.append((got.selected_requests, got.rest_requests, got.attributes))
    return out


def assert_same(a: list[tuple[int, int, pd.DataFrame]], b: list[tuple[int, int, pd.DataFrame]]) -> None:
    for (sel_a, rest_a, attrs_a), (sel_b, rest_b, attrs_b) in zip(a, b, strict=True):
        assert (sel_a, rest_a) == (sel_b, rest_b)
        assert len(attrs_a) > 5
        # (rows of equal difference come in no fixed order)
        key = ["source", "span_name", "key", "value"]
        pd.testing.assert_frame_equal(
            attrs_a.sort_values(key, ignore_index=True), attrs_b.sort_values(key, ignore_index=True)
        )


def test_the_fixture_is_a_version_5_store_of_two_runs(v5_store: Path) -> None:
    assert rows(v5_store, "SELECT version FROM schema_version") == [(5,)]
    assert rows(v5_store, "SELECT RunLabel, count(*) FROM requests GROUP BY ALL ORDER BY ALL") == [
        ("gc", 300),
        ("gen", 345),
    ]


def test_a_version_5_store_migrates_losing_nothing_and_answers_as_after_a_derive(
    v5_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {name: rows(v5_store, text) for name, text in TABLES.items()}
    assert main(["migrate", "--db", str(v5_store)]) == 0
    assert "schema version 5 -> 6, 6,900 spans converted" in capsys.readouterr().out
    assert rows(v5_store, "SELECT version FROM schema_version") == [(6,)]
    assert {name: rows(v5_store, text) for name, text in TABLES.items()} == before
    # nothing recomputed: every request's spans are found by their TraceId until the run is derived
    assert rows(v5_store, "SELECT count(SpanStarts) FROM requests") == [(0,)]
    migrated = answers(v5_store)
    with connect_writer(v5_store) as conn:
        refresh_all(conn)
    assert rows(v5_store, "SELECT count(*) FROM requests WHERE SpanStarts IS NULL") == [(0,)]
    # the derive's rows are what version 5 derived, the new column aside
    assert rows(v5_store, TABLES["requests"]) == before["requests"]
    assert_same(answers(v5_store), migrated)


def test_every_derive_keeps_each_requests_span_starts(v5_store: Path) -> None:
    """A whole-run derive from the spans, one that keeps the run's paths (a stage-rule edit's first),
    and a rule edit re-mapped from those paths: each request's starts are its trace's spans'."""
    from tailscope.store.duckdb.rule_remap import replace_rules
    from tailscope.store.duckdb.rules import rules_in_force

    with connect_writer(v5_store) as conn:
        refresh_all(conn)
    plain = rows(v5_store, TRUTH)
    assert len(plain) == 645 and all(starts == truth for _, _, starts, truth in plain)
    assert sum(len(starts) for _, _, starts, _ in plain) > 6000  # distinct starts of 6,900 spans
    with connect_writer(v5_store) as conn:
        rules = rules_in_force(conn)
        replace_rules(conn, [*rules[1:], rules[0]])  # from the spans, the paths kept
        assert conn.execute("SELECT bool_and(PathsKept) FROM derive_state").fetchone()[0]
        conn.execute("UPDATE requests SET SpanStarts = NULL WHERE RunLabel = 'gc'")
        replace_rules(conn, rules)  # re-mapped from the kept paths: the starts left as they are
    assert rows(v5_store, TRUTH) == [
        (run, trace, None if run == "gc" else starts, truth) for run, trace, starts, truth in plain
    ]
    with connect_writer(v5_store) as conn:
        refresh_all(conn)  # with the paths kept: the paths' derive writes them
    assert rows(v5_store, TRUTH) == plain


def test_sampled_spans_are_the_same_found_by_start_times_by_trace_id_or_both(v5_store: Path) -> None:
    with connect_writer(v5_store) as conn:
        refresh_all(conn)
    found = answers(v5_store)
    with connect_writer(v5_store) as conn:  # half the requests as if derived before version 6
        conn.execute("UPDATE requests SET SpanStarts = NULL WHERE hash(TraceId) % 2 = 0")
    assert_same(answers(v5_store), found)
    with connect_writer(v5_store) as conn:  # all of them
        conn.execute("UPDATE requests SET SpanStarts = NULL")
    assert_same(answers(v5_store), found)


def test_another_traces_span_starting_in_the_same_nanosecond_is_not_counted(v5_store: Path) -> None:
    """The start times find every span that starts then; only the sampled traces' spans count."""
    with connect_writer(v5_store) as conn:
        refresh_all(conn)
        # a span of a trace that is no request (no root of its own: its parent is missing) at the
        # start of every gc span, with an attribute no request has
        conn.execute(
            "INSERT INTO otel_traces SELECT * REPLACE ('stray' || TraceId AS TraceId, "
            "'{\"stray.key\":\"x\"}' AS SpanAttributes, 'missing' AS ParentSpanId) "
            "FROM otel_traces WHERE RunLabel = 'gc'"
        )
    got = tail_vs_body(DuckDBStore(v5_store), Filter(run="gc"), tail_quantile=0.9, sample=1000, limit=10_000)
    assert len(got.attributes) > 5
    assert "stray.key" not in set(got.attributes["key"])
