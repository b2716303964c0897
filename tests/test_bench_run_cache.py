"""bench/run_cache.py: a cached blind run gives the diagnosis the same store and truth as a fresh one,
and any change to the simulator, loaders or store sources is a new key."""

from __future__ import annotations

from pathlib import Path

import duckdb

from bench import run_cache


def _rows(db: Path) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT count(*) FROM otel_traces").fetchone()[0]


def test_a_cached_run_is_a_private_copy_of_the_same_store_and_summary(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with run_cache.loaded_run("bff-fanout", "healthy", 60, 0, None) as (db, fresh):
        fresh_rows = _rows(db)
    with run_cache.loaded_run("bff-fanout", "healthy", 60, 0, cache) as (db, first):
        assert _rows(db) == fresh_rows > 0
    kept = sorted(p.name for p in (cache / run_cache.digest("bff-fanout")).iterdir())
    assert kept == ["bff-fanout--healthy--60--0.duckdb", "bff-fanout--healthy--60--0.json"]
    with run_cache.loaded_run("bff-fanout", "healthy", 60, 0, cache) as (db, again):
        assert _rows(db) == fresh_rows
        with duckdb.connect(str(db)) as con:  # the diagnosis' copy: writing it leaves the cache alone
            con.execute("DELETE FROM otel_traces")
    assert again == first and again["truth"] == fresh["truth"] and again["spans"] == fresh["spans"]
    with run_cache.loaded_run("bff-fanout", "healthy", 60, 0, cache) as (db, _):
        assert _rows(db) == fresh_rows


def test_the_key_covers_the_family_shared_simulator_loader_and_store_only(tmp_path: Path) -> None:
    files = ("reference_pipeline/simulate/bff_fanout.py", "reference_pipeline/simulate/bff_fanout_spans.py",
             "reference_pipeline/simulate/trace_table.py", "reference_pipeline/simulate/go_ray_flow.py",
             "reference_pipeline/simulate/blind.py", "ingest/b.py", "tailscope/store/c.sql",
             "tailscope/analysis/diagnosis/d.py", "tailscope/sql/diagnosis_gc_events.sql")
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")

    def key() -> str:
        return run_cache.digest.__wrapped__("bff-fanout", tmp_path)

    before = key()
    for unrelated in ("tailscope/analysis/diagnosis/d.py", "reference_pipeline/simulate/go_ray_flow.py",
                      "reference_pipeline/simulate/blind.py",  # the diagnosis, another family, registration
                      "tailscope/sql/diagnosis_gc_events.sql"):  # a statement read at diagnosis time only
        (tmp_path / unrelated).write_text("x = 2\n")
        assert key() == before, unrelated
    for rel in files[:3] + files[5:7]:
        (tmp_path / rel).write_text((tmp_path / rel).read_text() + "# changed\n")
        changed = key()
        assert changed != before, rel
        before = changed
