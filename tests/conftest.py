"""Shared fixtures: where the repository and the real-world corpus are, and a fresh store."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT.parent / "shared" / "fixtures" / "real"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def corpus_dir() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"real-world corpus not found at {CORPUS} (it lives beside the checkout in shared/)")
    return CORPUS


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.duckdb"


@pytest.fixture
def chdb_store(tmp_path: Path):
    """A fresh chdb store with the exporter's otel_traces and tailscope's tables (skips without chdb)."""
    pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")
    from tailscope.store.clickhouse.engine import ClickHouseStore
    from tailscope.store.engine import open_store

    store = open_store(f"chdb://{tmp_path / 'ch'}", time_limit_s=30)
    assert isinstance(store, ClickHouseStore)
    store.prepare(writing=True)
    yield store
    store.close()
