"""Editing the stage rules and the phase rules on a ClickHouse store (the dashboard's editors,
analysis.save_rules / save_phase_rules): the edited list is stored in tailscope_stage_rules /
tailscope_phase_rules, every run is derived again with it, and the derived requests are those DuckDB
derives with the same rules; a regex RE2 cannot compile is refused with its reason on both engines,
and nothing changes then."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_clickhouse_ingest import _steady_file

from ingest.loader import load_paths
from tailscope.analysis import (
    StageRule,
    default_phase_rules,
    default_rules,
    list_phase_rules,
    list_rules,
    save_phase_rules,
    save_rules,
    validate_rules,
)
from tailscope.store.clickhouse import dedupe as ch_dedupe
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.clickhouse.statements import RunSelection
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.store.engine import open_store

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
        load_paths([path], chdb_store, run)  # type: ignore[arg-type]
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


def _frameworks_on_both(tmp_path: Path) -> tuple[Store, ClickHouseStore]:
    """The parity tests' serving-framework traces (vLLM, Triton, TGI phases) in a DuckDB file and a
    chdb folder, as run "frameworks"."""
    from parity_traces import _frameworks

    batches = _frameworks()
    with connect_writer(tmp_path / "d.duckdb") as writer:
        for batch in batches:
            conn = writer.cursor()
            conn.register("batch", batch)
            conn.execute("INSERT INTO otel_traces SELECT *, 'frameworks' FROM batch").fetchall()
            conn.unregister("batch")
        refresh_run(writer.cursor(), "frameworks")
    clickhouse = open_store(f"chdb://{tmp_path / 'chdb'}")
    assert isinstance(clickhouse, ClickHouseStore)
    clickhouse.create_tables()
    bounds = [ch_dedupe.append_spans_once(clickhouse, batch, "frameworks") for batch in batches]
    selection = RunSelection(
        min(b[0] for b in bounds), max(b[1] for b in bounds), {"tailscope.run": "frameworks"}
    )
    ch_write.define_run(clickhouse, "frameworks", selection)
    ch_write.refresh_run(clickhouse, "frameworks")
    return Store(tmp_path / "d.duckdb"), clickhouse


PHASE_COLUMNS = "TraceId, DominantStage, queue_ns, preprocessing_ns, model_forward_ns, postprocessing_ns"


def _phase_requests(duck: Store, clickhouse: ClickHouseStore) -> tuple[list[tuple], list[tuple]]:
    expected = duck.query(f"SELECT {PHASE_COLUMNS} FROM requests ORDER BY TraceId").rows
    got = clickhouse.query(f"SELECT {PHASE_COLUMNS} FROM tailscope_requests ORDER BY TraceId").rows
    return expected, got


def test_edited_phase_rules_derive_every_run_again_as_on_duckdb(tmp_path: Path) -> None:
    duck, clickhouse = _frameworks_on_both(tmp_path)
    before = _phase_requests(duck, clickhouse)
    assert before[1] == before[0] and before[1]
    # vLLM's decode counted as postprocessing, TGI's validation rule dropped
    edited = [
        replace(r, stage="postprocessing") if r.phase == "decode" else r
        for r in default_phase_rules()
        if not (r.framework == "TGI" and r.phase == "validation")
    ]
    for store in (duck, clickhouse):
        save_phase_rules(store, edited)
    assert list_phase_rules(clickhouse) == list_phase_rules(duck)
    expected, got = _phase_requests(duck, clickhouse)
    assert got == expected and got != before[1]
    bad = [replace(edited[0], name_regex="(unclosed")]
    with pytest.raises(ValueError, match="not a valid RE2 regex"):
        save_phase_rules(clickhouse, bad)
    save_phase_rules(clickhouse, default_phase_rules())  # and back
    assert _phase_requests(duck, clickhouse)[1] == before[1]
    clickhouse.close()
