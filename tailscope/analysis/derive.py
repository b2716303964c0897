"""Derived per-request data, rebuilt for a run inside the writer's transaction.

The ingest loader and the OTLP receiver call `refresh_run(conn, run_label)` after writing a run's
spans, inside the same transaction, so a reader never sees spans without their derived rows.
"""

from __future__ import annotations

import duckdb


def refresh_run(conn: duckdb.DuckDBPyConnection, run_label: str) -> None:
    """Rebuild the derived tables of one run (implemented by the analysis layer)."""
    del conn, run_label
