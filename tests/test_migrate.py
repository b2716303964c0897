"""Schema version 1 -> 5 (2, 3, 4, then 5): a store made by the version-1 code is converted in place, losing
nothing. (Version 2 -> 3 with a sampled run's weights: tests/test_sample_weights.py; 3 -> 4:
tests/test_span_times.py; 4 -> 5: tests/test_rule_remap.py.)

tests/fixtures/store_v1.duckdb.gz was written by tailscope at commit 477d030 (schema version 1,
attributes as MAP columns, events and links as lists of structs):

    tailscope pipeline simulate --scenario gc-pressure --requests 150 --out gc.json --db v1.duckdb \
        --run-label gc                                   # 1,950 spans with python.gc events
    python bench/gen_otlp.py --spans 2000 --per-request 200 --out gen.jsonl
    tailscope ingest gen.jsonl --db v1.duckdb --run gen  # 2,007 spans, events and links
    # plus one stage rule added by hand: position 22, downstream, name ~ ^custom

The tests read the version-1 content straight from the file (MAP columns), migrate, and compare.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tailscope.cli.main import main
from tailscope.store.duckdb import migrate as migration
from tailscope.store.duckdb.connection import connect_reader, connect_writer
from tailscope.store.errors import StoreVersionError

FIXTURE = Path(__file__).parent / "fixtures" / "store_v1.duckdb.gz"
SPAN_KEY = "RunLabel, TraceId, SpanId"


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    path = tmp_path / "old.duckdb"
    with gzip.open(FIXTURE, "rb") as source, path.open("wb") as target:
        shutil.copyfileobj(source, target)
    return path


def table(path: Path, statement: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute(statement).fetchall()


def v1_content(path: Path) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """Every span's attributes, events and links as Python values, read from the MAP columns."""
    rows = table(
        path,
        f"SELECT {SPAN_KEY}, ResourceAttributes, SpanAttributes,"
        " [(epoch_ns(e.Timestamp), e.Name, e.Attributes) FOR e IN Events],"
        " [(k.TraceId, k.SpanId, k.TraceState, k.Attributes) FOR k IN Links] FROM otel_traces",
    )
    return {
        row[:3]: (
            dict(row[3]),
            dict(row[4]),
            [(ts, name, dict(attrs)) for ts, name, attrs in row[5]],
            [(trace, span, state, dict(attrs)) for trace, span, state, attrs in row[6]],
        )
        for row in rows
    }


def v2_content(path: Path) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """The same, parsed from the JSON text columns of a version-2 store."""
    rows = table(
        path, f"SELECT {SPAN_KEY}, ResourceAttributes, SpanAttributes, Events, Links FROM otel_traces"
    )
    return {
        row[:3]: (
            json.loads(row[3]),
            json.loads(row[4]),
            [(e["Timestamp"], e["Name"], e["Attributes"]) for e in json.loads(row[5])],
            [(k["TraceId"], k["SpanId"], k["TraceState"], k["Attributes"]) for k in json.loads(row[6])],
        )
        for row in rows
    }


UNCHANGED_TABLES = (
    "SELECT * EXCLUDE (ResourceAttributes, SpanAttributes, Events, Links) FROM otel_traces ORDER BY ALL",
    "SELECT * FROM runs ORDER BY RunLabel",
    "SELECT * FROM stage_rules ORDER BY position",
    # version 3 adds Weight, version 4 SpanTimes
    "SELECT COLUMNS(lambda c: c NOT IN ('Weight', 'SpanTimes')) FROM requests ORDER BY ALL",
    # version 5 adds PathsKept (NULL: the next rule edit derives from the spans)
    "SELECT COLUMNS(lambda c: c <> 'PathsKept') FROM derive_state ORDER BY RunLabel",
)


def snapshot(path: Path) -> list[list[tuple[Any, ...]]]:
    return [table(path, statement) for statement in UNCHANGED_TABLES]


def test_the_fixture_is_a_version_1_store_with_events_links_and_a_user_rule(v1_store: Path) -> None:
    assert table(v1_store, "SELECT version FROM schema_version") == [(1,)]
    content = v1_content(v1_store)
    assert len(content) == 3957
    assert sum(len(v[2]) for v in content.values()) == 225 and sum(len(v[3]) for v in content.values()) == 215
    assert table(v1_store, "SELECT description FROM stage_rules WHERE name_regex = '^custom'") == [
        ("a rule the user added",)
    ]


def test_a_reader_of_a_version_1_store_is_told_what_to_run_and_changes_nothing(
    v1_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = v1_store.read_bytes()
    with (
        pytest.raises(StoreVersionError, match=r"schema version 1.*tailscope migrate --db"),
        connect_reader(v1_store),
    ):
        pass
    assert main(["waterfall", "--db", str(v1_store), "--run", "gc"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tailscope: {v1_store}: the store has schema version 1"), err
    assert v1_store.read_bytes() == before


def test_migrate_converts_in_place_and_loses_nothing(
    v1_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content, unchanged = v1_content(v1_store), snapshot(v1_store)
    assert main(["migrate", "--db", str(v1_store)]) == 0
    out = capsys.readouterr().out
    assert "schema version 1 -> 5, 3,957 spans converted" in out, out
    assert table(v1_store, "SELECT version FROM schema_version") == [(5,)]
    # version 5: the kept span paths, empty (a store's first rule edit derives from the spans)
    assert table(v1_store, "SELECT count(*) FROM request_paths") == [(0,)]
    assert table(v1_store, "SELECT count(PathsKept) FROM derive_state") == [(0,)]
    assert table(
        v1_store,
        "SELECT DISTINCT data_type FROM duckdb_columns() WHERE table_name = 'otel_traces'"
        " AND column_name IN ('ResourceAttributes', 'SpanAttributes', 'Events', 'Links')",
    ) == [("VARCHAR",)]
    assert v2_content(v1_store) == content
    assert snapshot(v1_store) == unchanged
    assert table(v1_store, "SELECT DISTINCT Weight FROM requests") == [(1.0,)]  # nothing was sampled
    assert main(["migrate", "--db", str(v1_store)]) == 0
    assert "already at schema version 5" in capsys.readouterr().out


def test_the_migrated_spans_derive_the_same_requests_as_version_1_did(v1_store: Path) -> None:
    """The SQL now reads JSON text (tailscope.stage, http.route, instance, the rules' attribute
    regexes): deriving every run again from the migrated spans must give the stored v1 rows."""
    from tailscope.store.duckdb.derive import refresh_all

    before = [(*row, 1.0) for row in table(v1_store, "SELECT * FROM requests ORDER BY ALL")]  # + Weight
    with connect_writer(v1_store) as conn:  # a writer migrates on open
        refresh_all(conn)
    assert table(v1_store, "SELECT * EXCLUDE (SpanTimes) FROM requests ORDER BY ALL") == before
    assert len(before) == 150 + 231
    # version 4: SpanTimes for the requests of the lowest 1/16 of trace-id hashes (tests/test_span_times.py)
    [(kept, low)] = table(
        v1_store, "SELECT count(SpanTimes), count(*) FILTER (WHERE hash(TraceId) <= 2**60 - 1) FROM requests"
    )
    assert kept == low > 0


def test_the_migrated_store_answers_reports_and_the_diagnosis(v1_store: Path) -> None:
    from tailscope.analysis import Filter, waterfall
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.store.duckdb.connection import migrate_store
    from tailscope.store.duckdb.store import DuckDBStore as Store

    migrate_store(v1_store)
    store = Store(v1_store)
    assert waterfall(store, Filter(run="gc")).requests_total == 150
    findings = diagnose(store, "gc").findings
    assert findings and findings[0].pattern == "gc_pause", [f.pattern for f in findings]


def test_a_failed_migration_leaves_the_version_1_store_as_it_was(
    v1_store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    unchanged, content = snapshot(v1_store), v1_content(v1_store)
    real = migration._statements
    monkeypatch.setattr(migration, "_statements", lambda name: [*real(name), "SELECT error('disk full')"])
    with pytest.raises(duckdb.Error, match="disk full"):
        migration_of(v1_store)
    assert table(v1_store, "SELECT version FROM schema_version") == [(1,)]
    assert v1_content(v1_store) == content and snapshot(v1_store) == unchanged
    assert main(["migrate", "--db", str(v1_store)]) == 1  # the command says so in one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "migration failed, store unchanged" in err[0] and "disk full" in err[0], err
    assert table(v1_store, "SELECT version FROM schema_version") == [(1,)]


def migration_of(path: Path) -> None:
    from tailscope.store.duckdb.connection import migrate_store

    migrate_store(path)


def test_ingest_into_a_version_1_store_migrates_it_and_adds_the_run(v1_store: Path, tmp_path: Path) -> None:
    content = v1_content(v1_store)
    trace = tmp_path / "new.json"
    span = {
        "traceId": "ab" * 16, "spanId": "cd" * 8, "name": "POST /predict", "kind": 2,
        "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000020000000",
        "attributes": [{"key": "http.route", "value": {"stringValue": "/predict"}}],
    }  # fmt: skip
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]}
    trace.write_text(
        json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]})
    )
    assert main(["ingest", str(trace), "--db", str(v1_store), "--run", "new"]) == 0
    stored = v2_content(v1_store)
    assert {key: stored[key] for key in content} == content
    assert stored[("new", "ab" * 16, "cd" * 8)][1] == {"http.route": "/predict"}
    assert table(v1_store, "SELECT Route FROM requests WHERE RunLabel = 'new'") == [("/predict",)]


def test_a_store_from_a_newer_tailscope_is_refused_by_readers_and_writers(tmp_path: Path) -> None:
    path = tmp_path / "future.duckdb"
    with connect_writer(path) as conn:
        conn.execute("UPDATE schema_version SET version = ?", [migration.CURRENT_VERSION + 1])
    for opener in (connect_reader, connect_writer):
        with (
            pytest.raises(
                StoreVersionError,
                match=f"schema version {migration.CURRENT_VERSION + 1}, written by a newer tailscope",
            ),
            opener(path),
        ):
            pass
    assert table(path, "SELECT version FROM schema_version") == [(migration.CURRENT_VERSION + 1,)]


def test_a_duckdb_file_that_is_not_a_store_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT 1 AS a")
    with pytest.raises(StoreVersionError, match="not a tailscope store"), connect_reader(path):
        pass
