"""A span is stored once per run on ClickHouse too (tailscope.store.clickhouse.dedupe), as the DuckDB loader
keeps it: a file loaded again, or files that overlap, add nothing, and two different spans that
share an id are both kept. Loaded twice, a run gives the same counts, requests and diagnosis as
loaded once (before, the duplicates doubled the span counts and moved the diagnosis)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_clickhouse_ingest import REQUESTS_OF, SPANS_OF, _steady_file

from ingest.loader import load_paths
from ingest.loader import load_paths as duckdb_load_paths
from tailscope.analysis.diagnosis import diagnose
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.duckdb.store import DuckDBStore as Store

pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")


def _findings(source: object, run: str) -> list[tuple[str, str, float]]:
    return [(f.pattern, f.span_name, round(f.confidence, 6)) for f in diagnose(source, run).findings]


def test_a_file_loaded_twice_is_stored_once(chdb_store: ClickHouseStore, tmp_path: Path) -> None:
    path = _steady_file(tmp_path, 120)
    first = load_paths([path], chdb_store, "r")
    once = chdb_store.query(SPANS_OF, {"run": "r"}).rows, chdb_store.query(REQUESTS_OF, {"run": "r"}).rows
    findings = _findings(chdb_store, "r")
    again = load_paths([path], chdb_store, "r")
    assert again.files[0].spans == 0 and again.files[0].duplicates == first.files[0].spans > 0
    assert chdb_store.query(SPANS_OF, {"run": "r"}).rows == once[0]
    assert chdb_store.query(REQUESTS_OF, {"run": "r"}).rows == once[1]
    assert _findings(chdb_store, "r") == findings
    duck = tmp_path / "d.duckdb"
    for _ in range(2):
        duckdb_load_paths([path], duck, "r")
    assert _findings(Store(duck), "r") == findings  # the same as on DuckDB, loaded twice there too


def test_overlapping_files_and_spans_sharing_an_id(chdb_store: ClickHouseStore, tmp_path: Path) -> None:
    path = _steady_file(tmp_path, 40)
    lines = path.read_bytes().splitlines()
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(b"\n".join(lines[: len(lines) * 2 // 3]) + b"\n")
    second.write_bytes(b"\n".join(lines[len(lines) // 3 :]) + b"\n")  # a third of the lines in both
    # a span with the id of another but its own timing: a different span (Jaeger's ui_01.json has such)
    request = json.loads(lines[0])
    span = request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["startTimeUnixNano"] = str(int(span["startTimeUnixNano"]) + 1000)
    twin = tmp_path / "twin.jsonl"
    twin.write_bytes(json.dumps(request).encode() + b"\n" + lines[0] + b"\n")
    loaded = load_paths([first, second, twin], chdb_store, "r")
    whole = load_paths([path], chdb_store, "whole")
    stored = sum(f.spans for f in loaded.files)
    spans_in_first_line = sum(len(s["spans"]) for r in request["resourceSpans"] for s in r["scopeSpans"])
    assert stored == whole.files[0].spans + 1  # each span once, and the twin with its own timing
    assert loaded.files[2].duplicates == 2 * spans_in_first_line - 1
    assert len(chdb_store.query(SPANS_OF, {"run": "r"}).rows) == stored


def test_a_new_runs_file_that_repeats_spans_stores_each_once(
    chdb_store: ClickHouseStore, tmp_path: Path
) -> None:
    # a new run from one file is written while derived (ch_overlap); a file that repeats its spans
    # (an exporter's retry appended to the same file) is stored once instead, as DuckDB stores it
    path = _steady_file(tmp_path, 40)
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_bytes(path.read_bytes() * 2)
    once = load_paths([path], chdb_store, "once")
    twice = load_paths([doubled], chdb_store, "twice")
    assert twice.files[0].spans == once.files[0].spans > 0
    assert twice.files[0].duplicates == once.files[0].spans
    assert (
        chdb_store.query(SPANS_OF, {"run": "twice"}).rows == chdb_store.query(SPANS_OF, {"run": "once"}).rows
    )
    assert (
        chdb_store.query(REQUESTS_OF, {"run": "twice"}).rows
        == chdb_store.query(REQUESTS_OF, {"run": "once"}).rows
    )
    duck = tmp_path / "d.duckdb"
    duckdb_load_paths([doubled], duck, "twice")
    assert _findings(chdb_store, "twice") == _findings(Store(duck), "twice")
