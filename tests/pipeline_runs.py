"""Runs of the reference pipeline for the end-to-end tests: run a scenario, load its traces into a
store, and read the stored spans back with DuckDB (no dashboard analysis code in between)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb
import pytest

from reference_pipeline import span_model as sm

NEEDS_PIPELINE = [
    pytest.mark.torch,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None, reason="needs PyTorch: pip install -e '.[pipeline]'"
    ),
    pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="needs tokenizers"),
]

RPS = 12.0
DURATION_S = 6.0


def run_and_load(
    tmp: Path,
    scenario: str,
    db: Path,
    duration_s: float = DURATION_S,
    rps: float = RPS,
    label: str | None = None,
    **options,
) -> dict:
    from ingest.loader import load_paths
    from reference_pipeline.runner import RunOptions, run_pipeline

    out = tmp / f"{label or scenario}.jsonl"
    summary = run_pipeline(
        RunOptions(scenario=scenario, duration_s=duration_s, rps=rps, out=out, seed=3, **options)
    )
    loaded = load_paths([out], db, label or scenario)
    assert not [f.error for f in loaded.files if f.error]
    return summary


def quantiles(db: Path, run: str, span_name: str, service: str = sm.SERVICE_NAME) -> dict[str, float]:
    """p50/p99/max (ms) and count of one span name in one run."""
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute(
            """
            SELECT count(*), quantile_cont(Duration, 0.5) / 1e6, quantile_cont(Duration, 0.99) / 1e6,
                   max(Duration) / 1e6
            FROM otel_traces WHERE RunLabel = ? AND SpanName = ? AND ServiceName = ?
            """,
            [run, span_name, service],
        ).fetchone()
    return {"n": row[0], "p50": row[1] or 0.0, "p99": row[2] or 0.0, "max": row[3] or 0.0}


def query(db: Path, sql: str, params: list) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(sql, params).fetchall()
