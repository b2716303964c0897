"""The store module: schema creation and connections."""

from __future__ import annotations


def test_writer_on_existing_store_has_no_open_result(tmp_path) -> None:
    from tailscope.store.duckdb.connection import connect_writer

    path = tmp_path / "s.duckdb"
    for _ in range(2):  # the second open finds the schema in place
        with connect_writer(path) as conn:
            conn.execute("CREATE OR REPLACE TEMP TABLE t AS SELECT 1 AS a")
            assert conn.execute("SELECT a FROM t").fetchall() == [(1,)]
