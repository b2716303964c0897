"""Every DuckDB store connection runs under a memory cap, not DuckDB's default of 80 % of the
machine's memory (a 100 M-span store grew one process to 18 GB with it: issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.store.duckdb.connection import connect_reader, connect_writer

GIB = 2**30


def memory_limit_bytes(conn) -> int:
    return conn.execute(
        "SELECT memory_limit::BIGINT FROM (SELECT current_setting('memory_limit') AS s), "
        "LATERAL (SELECT CAST(regexp_extract(s, '([0-9.]+)', 1) AS DOUBLE) "
        "* CASE WHEN s LIKE '%GiB' THEN 2^30 WHEN s LIKE '%MiB' THEN 2^20 ELSE 1 END AS memory_limit)"
    ).fetchone()[0]


def test_readers_and_writers_are_capped_at_one_gib(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    with connect_writer(db) as conn:
        assert memory_limit_bytes(conn) <= GIB
    with connect_reader(db) as conn:
        assert memory_limit_bytes(conn) <= GIB


def test_the_cap_can_be_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILSCOPE_DUCKDB_MEMORY_LIMIT", "3GB")
    with connect_reader(tmp_path / "store.duckdb") as conn:
        assert 2.5 * GIB < memory_limit_bytes(conn) <= 3 * GIB
