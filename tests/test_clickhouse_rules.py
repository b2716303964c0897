"""Editing the stage rules on a ClickHouse store (the dashboard's rules editor, analysis.save_rules):
the edited list is stored in tailscope_stage_rules, every run is derived again with it, and the
derived requests are those DuckDB derives with the same rules; a regex RE2 cannot compile is refused
with its reason on both engines, and nothing changes then."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_clickhouse_ingest import _steady_file

from ingest import clickhouse_load
from ingest.loader import load_paths
from tailscope.analysis import StageRule, default_rules, list_rules, save_rules, validate_rules
from tailscope.store.db import Store

pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")

COLUMNS = "TraceId, DominantStage, feature_hydration_ns, downstream_ns, unattributed_ns"


def _requests(duck: Store, clickhouse: object, run: str) -> tuple[list[tuple], list[tuple]]:
    expected = duck.query(f"SELECT {COLUMNS} FROM requests WHERE RunLabel = ? ORDER BY TraceId", [run]).rows
    got = clickhouse.query(  # type: ignore[attr-defined]
        f"SELECT {COLUMNS} FROM tailscope_requests WHERE RunLabel = {{run:String}} ORDER BY TraceId",
        {"run": run},
    ).rows
    return expected, got


def test_edited_rules_derive_every_run_again_as_on_duckdb(chdb_store: object, tmp_path: Path) -> None:
    path = _steady_file(tmp_path, 50)
    duck = Store(tmp_path / "d.duckdb")
    for run in ("a", "b"):
        load_paths([path], duck.path, run)
        clickhouse_load.load_paths(chdb_store, [path], run)  # type: ignore[arg-type]
    before = _requests(duck, chdb_store, "a")[1]
    # the enrichment service's server span (downstream, from its client parent) as feature hydration
    rules = default_rules()
    enrich = StageRule(0, "feature_hydration", "Server", "enrich", None, "the enricher fetches features")
    edited = [enrich, *rules]
    for store in (duck, chdb_store):
        save_rules(store, edited)
    assert [r.stage for r in list_rules(chdb_store)] == [r.stage for r in edited]  # type: ignore[arg-type]
    for run in ("a", "b"):
        expected, got = _requests(duck, chdb_store, run)
        assert got == expected and len(got) == 50
    assert _requests(duck, chdb_store, "a")[1] != before  # the stages moved
    save_rules(chdb_store, default_rules())  # and back
    assert _requests(duck, chdb_store, "a")[1] == before


def test_a_bad_regex_is_refused_with_its_reason_on_both_engines(chdb_store: object, tmp_path: Path) -> None:
    bad = [replace(default_rules()[0], name_regex="(unclosed")]
    duck = Store(tmp_path / "d.duckdb")
    load_paths([_steady_file(tmp_path, 5)], duck.path, "a")
    for store in (duck, chdb_store):
        problems = validate_rules(store, bad)  # type: ignore[arg-type]
        assert problems == [
            "rule 1: name regex '(unclosed' is not a valid RE2 regex (missing ): (unclosed)"
        ], problems
        with pytest.raises(ValueError, match="not a valid RE2 regex"):
            save_rules(store, bad)
        assert list_rules(store) == default_rules()  # type: ignore[arg-type]
