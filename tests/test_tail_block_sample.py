"""Tail vs body's attribute sample of a large selection on DuckDB (tailscope.store.duckdb.tail_sample):
blocks of consecutive requests of each side, drawn equally likely, whose spans are read only in the
time windows around them, instead of a hash sample of traces from all over the run (whose spans
cost a scan of the run's trace ids). MIN_REQUESTS is lowered here so a small simulated run takes
the block path."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import duckdb
import numpy as np
import pytest
from analysis_spans import BASE_NS, S, add_trace, load

from ingest.columns import SpanColumns
from tailscope.analysis import Filter, tail_vs_body
from tailscope.analysis.types import Rect
from tailscope.store.block_sample import drawn_blocks
from tailscope.store.duckdb import tail_sample
from tailscope.store.duckdb.store import DuckDBStore as Store

REQUESTS = 3000


@pytest.fixture(scope="module")
def run_db(tmp_path_factory: pytest.TempPathFactory):
    """REQUESTS requests 20 ms apart whose attributes do not drift over time: a region and a cache
    hit drawn at random, the slow ones (a longer model step) more often in eu and missing the cache;
    the dominant stage the feature fetch or the model step."""
    path = tmp_path_factory.mktemp("blocks") / "store.duckdb"
    rng = np.random.default_rng(5)
    cols = SpanColumns()
    for n in range(REQUESTS):
        slow = rng.random() < 0.3
        region = rng.choice(
            ["us", "eu", "ap", "sa"], p=[0.4, 0.3, 0.2, 0.1] if not slow else [0.2, 0.5, 0.2, 0.1]
        )
        hit = "false" if rng.random() < (0.7 if slow else 0.2) else "true"
        model_ms = float(rng.uniform(30, 60) if slow else rng.uniform(5, 20))
        fetch_ms = float(rng.uniform(1, 25))  # longer than the model step in some requests
        fetch = S("fetch features", 1, 1 + fetch_ms, stage="feature_hydration", attrs={"cache.hit": hit})
        batch = str(int(rng.integers(1, 5)))
        model = S(
            "model", 1 + fetch_ms, 1 + fetch_ms + model_ms, stage="model_forward", attrs={"batch": batch}
        )
        root = S(
            "POST /predict",
            0,
            2 + fetch_ms + model_ms,
            [fetch, model],
            kind="Server",
            resource={"region": region},
        )
        add_trace(cols, root, n + 1, offset_ms=20.0 * n)
    load(path, "lp", cols)
    return path


def _expected_stage_shares(
    path, selected: Callable[[tuple], bool], sample: int
) -> dict[bool, dict[str, float]]:
    """The dominant stages' shares (%) of the block sample, computed here from the requests alone:
    each side in (Timestamp, TraceId) order, cut into blocks of ceil(sample / 8), the drawn ones."""
    rows = _requests(path)
    shares: dict[bool, dict[str, float]] = {}
    for side in (True, False):
        ordered = sorted((r for r in rows if selected(r) == side), key=lambda r: (r[1], r[0]))
        picked = [r for first, end in drawn_blocks(len(ordered), sample, side) for r in ordered[first:end]]
        stages = [r[3] for r in picked]
        shares[side] = {s: 100.0 * stages.count(s) / len(stages) for s in set(stages)}
    return shares


def _requests(path) -> list[tuple]:
    """(trace id, root start ns, Duration ns, dominant stage) of every request of the run."""
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute(
            "SELECT TraceId, epoch_ns(Timestamp), Duration, DominantStage FROM requests WHERE RunLabel = 'lp'"
        ).fetchall()


def _assert_stage_shares(got, expected: dict[bool, dict[str, float]]) -> None:
    stages = got.attributes[got.attributes["source"] == "stage"]
    assert any(len(shares) > 1 for shares in expected.values())  # requests differ in dominant stage
    for side, column in ((True, "selected_pct"), (False, "rest_pct")):
        shares = {row["value"]: row[column] for _, row in stages.iterrows() if row[column] > 0}
        assert shares == pytest.approx(expected[side], abs=1e-9)


def test_a_large_selection_samples_blocks_of_consecutive_requests(run_db, monkeypatch) -> None:
    monkeypatch.setattr(tail_sample, "MIN_REQUESTS", 0)
    got = tail_vs_body(Store(run_db), Filter(run="lp"), tail_quantile=0.9, sample=64, limit=10_000)
    threshold = float(np.quantile(np.array([r[2] for r in _requests(run_db)], dtype=float), 0.9))
    _assert_stage_shares(got, _expected_stage_shares(run_db, lambda r: r[2] >= threshold, 64))


def test_a_large_rectangle_samples_blocks_of_consecutive_requests(run_db, monkeypatch) -> None:
    # a heatmap rectangle: the middle third of the run's time, e2e 20-45 ms; the rest is every other request
    monkeypatch.setattr(tail_sample, "MIN_REQUESTS", 0)
    start_ns, end_ns = BASE_NS + 20_000_000 * REQUESTS // 3, BASE_NS + 2 * 20_000_000 * REQUESTS // 3
    rect = Rect(
        datetime.fromtimestamp(start_ns / 1e9, tz=UTC).replace(tzinfo=None),
        datetime.fromtimestamp(end_ns / 1e9, tz=UTC).replace(tzinfo=None),
        20.0,
        45.0,
    )
    got = tail_vs_body(Store(run_db), Filter(run="lp"), rect=rect, sample=48, limit=10_000)
    assert got.selected_requests > 48

    def inside(r: tuple) -> bool:
        return start_ns <= r[1] < end_ns and 20_000_000 <= r[2] < 45_000_000

    _assert_stage_shares(got, _expected_stage_shares(run_db, inside, 48))


def test_drawn_blocks_are_equally_likely_and_cover_a_small_side() -> None:
    assert drawn_blocks(30, 64, True) == [(0, 8), (8, 16), (16, 24), (24, 30)]  # every one
    counts, expected = np.zeros(480), np.zeros(480)
    for total in range(20_000, 60_000, 7):
        blocks = drawn_blocks(total, 1000, False)
        assert len(blocks) == 8 and all(end - first <= 125 and first % 125 == 0 for first, end in blocks)
        for first, _ in blocks:
            counts[first // 125] += 1
        expected[: math.ceil(total / 125)] += 8 / math.ceil(total / 125)  # a fair draw's chance per block
    # each of the first 160 block numbers (in every side's range) drawn as often as a fair draw expects
    assert np.abs(counts[:160] / expected[:160] - 1).max() < 0.3
    assert abs(counts[:160].sum() / expected[:160].sum() - 1) < 0.02


def test_the_block_sample_is_within_its_stated_error_of_the_whole_selection(run_db, monkeypatch) -> None:
    """The stated error: on a run whose attributes do not drift over time, each value's share in a
    block sample of n per side is within 4 binomial standard errors, 4 sqrt(p (1 - p) / n), of its
    share in the whole selection (n = 200: at most 14 points; the default 1,000: at most 6.4)."""
    whole = tail_vs_body(Store(run_db), Filter(run="lp"), tail_quantile=0.5, sample=10**6, limit=10_000)
    monkeypatch.setattr(tail_sample, "MIN_REQUESTS", 0)
    n = 200
    got = tail_vs_body(Store(run_db), Filter(run="lp"), tail_quantile=0.5, sample=n, limit=10_000)
    key = ["source", "span_name", "key", "value"]
    merged = whole.attributes.merge(got.attributes, on=key, how="left", suffixes=("", "_sample")).fillna(0.0)
    # values, not bins (a sample's bin edges are its own quantiles)
    merged = merged[~merged["value"].str.contains("^< |^≥ | – ", regex=True)]
    assert len(merged) >= 10
    for column in ("selected_pct", "rest_pct"):
        p = merged[column] / 100
        bound = 100 * 4 * np.sqrt(p * (1 - p) / n) + 1e-9
        assert ((merged[f"{column}_sample"] - merged[column]).abs() <= bound).all()


def test_a_small_selection_keeps_the_hash_sample(run_db, monkeypatch) -> None:
    calls: list[str] = []
    original = tail_sample.block_parts
    monkeypatch.setattr(tail_sample, "block_parts", lambda *a: calls.append("blocks") or original(*a))
    tail_vs_body(Store(run_db), Filter(run="lp"), tail_quantile=0.9, sample=64)
    assert calls == []  # REQUESTS < MIN_REQUESTS
