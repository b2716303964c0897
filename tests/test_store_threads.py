"""DuckDB's threads fitted to the memory cap (tailscope.store.duckdb.threads): a 16-core machine ran
out of memory under the writers' 512 MB cap with one thread per core."""

from __future__ import annotations

import pytest

from tailscope import sql
from tailscope.store.duckdb import threads
from tailscope.store.duckdb.connection import connect_reader, connect_writer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1GB", 10**9),
        ("512MB", 512 * 10**6),
        ("488.2 MiB", int(488.2 * 2**20)),
        ("4GiB", 4 * 2**30),
        ("100 bytes", 100),
        ("80%", None),
        ("lots", None),
    ],
)
def test_size_bytes_reads_duckdb_sizes(text: str, expected: int | None) -> None:
    assert threads.size_bytes(text) == expected


def test_threads_follow_the_memory_cap_not_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAILSCOPE_DUCKDB_THREADS", raising=False)
    assert threads.threads_for("488.2 MiB", cores=16) == 3  # the writers' cap on the 16-core box
    assert threads.threads_for("953.6 MiB", cores=16) == 5
    assert threads.threads_for("8GB", cores=16) == 16
    assert threads.threads_for("953.6 MiB", cores=2) == 2  # never more than the cores
    assert threads.threads_for("64MB", cores=16) == 1
    assert threads.threads_for("80%", cores=6) == 6


def test_threads_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILSCOPE_DUCKDB_THREADS", "7")
    assert threads.threads_for("488.2 MiB", cores=16) == 7


def test_connections_and_writers_set_their_threads(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAILSCOPE_DUCKDB_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 16)
    path = tmp_path / "t.duckdb"
    with connect_writer(path) as conn:
        assert conn.execute("SELECT current_setting('threads')").fetchone()[0] == 5
        conn.execute(sql.load("ingest_writer_memory"))
        assert threads.fit_threads(conn) == 3
        assert conn.execute("SELECT current_setting('threads')").fetchone()[0] == 3
    with connect_reader(path) as conn:
        assert conn.execute("SELECT current_setting('threads')").fetchone()[0] == 5
