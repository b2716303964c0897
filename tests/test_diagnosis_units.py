"""Diagnosis building blocks on hand-built inputs: statistics, the frame's request structure."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hand_frames import hand_frame

from tailscope.analysis.diagnosis.frame import exclusive_times
from tailscope.analysis.diagnosis.stats import (
    excess_share,
    gmm2,
    kl_surprise,
    lagged_correlation,
    logistic,
    spearman,
    tail_split,
    theil_sen,
)

MS = 1_000_000


def test_gmm2_recovers_two_modes_and_their_weights() -> None:
    rng = np.random.default_rng(1)
    x = np.r_[rng.normal(0.0, 0.3, 900), rng.normal(4.0, 0.3, 100)]
    mix = gmm2(x)
    assert mix is not None
    assert mix.mu[0] == pytest.approx(0.0, abs=0.1)
    assert mix.mu[1] == pytest.approx(4.0, abs=0.1)
    assert mix.w[1] == pytest.approx(0.1, abs=0.02)
    assert mix.separation > 5 and mix.bic_gain > 100


def test_gmm2_sees_one_mode_in_a_single_gaussian() -> None:
    x = np.random.default_rng(2).normal(0.0, 1.0, 2000)
    mix = gmm2(x)
    assert mix is None or mix.bic_gain < 10 or mix.separation < 2


def test_rank_correlation_and_robust_slope() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 8, 2000).astype(float)
    y = 1.0 + 2.0 * x + rng.normal(0, 0.5, 2000)
    y[:20] += 500  # outliers must not drag the slope
    assert spearman(x, y) > 0.9
    slope, intercept = theil_sen(x, y, rng)
    assert slope == pytest.approx(2.0, abs=0.1)
    assert intercept == pytest.approx(1.0, abs=0.3)


def test_lagged_correlation_finds_the_lag() -> None:
    a = np.zeros(100)
    a[[20, 50, 80]] = 10
    b = np.roll(a, 3)
    lag, r, _ = lagged_correlation(a, b, 10)
    assert lag == 3 and r > 0.99


def test_binomial_surprise_is_zero_at_or_below_expectation() -> None:
    s = kl_surprise(np.array([1, 10, 10]), np.array([10, 10, 100]), 0.1)
    assert s[0] == 0 and s[2] == 0 and s[1] == pytest.approx(10 * math.log(10))


def test_logistic_is_half_at_its_midpoint() -> None:
    assert logistic(0.3, 0.3, 0.1) == pytest.approx(0.5)
    assert logistic(0.5, 0.3, 0.1) > 0.85


def test_excess_share_of_a_quantity_that_is_the_whole_tail() -> None:
    lat = np.r_[np.full(990, 10.0), np.full(10, 110.0)]
    split = tail_split(lat)
    extra = lat - 10.0
    assert excess_share(extra, split) == pytest.approx(1.0)
    assert excess_share(np.full(1000, 10.0), split) == pytest.approx(0.0)


def test_exclusive_time_counts_overlapping_children_once() -> None:
    # parent 0..100, children 10..40 and 30..60 (overlap), and one sticking out 90..120 (clipped)
    parent = np.array([-1, 0, 0, 0])
    start = np.array([0, 10, 30, 90])
    dur = np.array([100, 30, 30, 30])
    excl = exclusive_times(parent, start, dur)
    assert excl.tolist() == [100 - 50 - 10, 30, 30, 30]


_frame = hand_frame


def test_request_root_is_the_server_span_under_a_client_wrapper() -> None:
    f = _frame(
        [
            (0, -1, "GET /", "Client", 0, 0, 12),  # load generator
            (0, 0, "GET /", "Server", 0, 1, 10),  # request root
            (0, 1, "work", "Internal", 0, 2, 5),
            (0, 2, "call", "Client", 0, 3, 2),
            (0, 3, "enrich", "Server", 1, 3, 1),  # a callee's server span is not a new request
            (1, -1, "job", "Internal", 1, 20, 4),  # a trace without server spans: its root
        ]
    )
    reqs = f.requests
    assert reqs.root.tolist() == [1, 5]
    assert reqs.client_latency[0] == 12 * MS and math.isnan(reqs.client_latency[1])
    assert f.request.tolist() == [-1, 0, 0, 0, 0, 1]
    assert f.leaf.tolist() == [False, False, False, False, True, True]


def test_request_index_counts_per_instance_in_start_order() -> None:
    rows = [(i, -1, "r", "Server", i % 2, 10 * i, 5) for i in range(6)]
    f = _frame(rows)
    assert f.requests.index_on_instance.tolist() == [0, 0, 1, 1, 2, 2]


def test_degenerate_runs_give_no_finding_and_no_error() -> None:
    from tailscope.analysis.diagnosis import diagnose_frame

    rng = np.random.default_rng(0)
    n = 300
    # every request one root span of zero length, all at the same instant, on one instance
    zero = _frame([(i, -1, "GET /", "Server", 0, 0, 0) for i in range(n)])
    result = diagnose_frame(zero)
    assert not result.errors and not result.findings
    # roots with identical children: no variance anywhere
    rows = []
    for i in range(n):
        rows.append((i, -1, "GET /", "Server", 0, 10 * i, 5))
        rows.append((i, 2 * i, "work", "Internal", 0, 10 * i + 1, 3))
    flat = diagnose_frame(_frame(rows))
    assert not flat.errors and all(f.confidence < 0.5 for f in flat.findings)
    # random noise without structure
    rows = [
        (
            i,
            -1,
            "GET /",
            "Server",
            int(rng.integers(0, 2)),
            int(rng.integers(0, 10_000)),
            int(rng.integers(1, 50)),
        )
        for i in range(n)
    ]
    noise = diagnose_frame(_frame(rows))
    assert not noise.errors and all(f.confidence < 0.5 for f in noise.findings)


def test_too_few_requests_is_said_not_guessed() -> None:
    from tailscope.analysis.diagnosis import diagnose_frame

    result = diagnose_frame(_frame([(i, -1, "GET /", "Server", 0, 10 * i, 5) for i in range(10)]))
    assert result.findings == [] and "too few" in (result.reason or "")


def test_real_world_exports_load_and_diagnose_without_errors(corpus_dir, tmp_path) -> None:
    """Every real export of the corpus in one run: odd ids, missing parents, no kinds, events."""
    from ingest.loader import load_paths
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.store.duckdb.store import DuckDBStore as Store

    db = tmp_path / "corpus.duckdb"
    files = [p for p in sorted(corpus_dir.rglob("*")) if p.is_file() and p.suffix not in (".md",)]
    files = [p for p in files if p.name != "manifest.json"]
    load_paths(files, db, "corpus", skip_bad=True)
    result = diagnose(Store(db), "corpus")
    assert not result.errors, result.errors
    assert result.spans > 0


def test_warmup_length_is_the_unbroken_slow_run_from_the_start() -> None:
    from tailscope.analysis.diagnosis.cold_start import warmup_length

    edges = np.array([0, 1, 2, 4, 8, 16, 32, 64])
    nan = np.nan
    # slow start (one bucket too small to judge), settled from index 8, a noisy slow bucket at 32
    medians = np.array([900.0, nan, 400.0, 60.0, 40.0, 41.0, 90.0, 40.0])
    assert warmup_length(medians, 40.0, edges) == 8  # not 64: the late noise is not warm-up
    assert warmup_length(np.array([40.0, 41.0, 39.0, 90.0, 40.0, 40.0, 40.0, 40.0]), 40.0, edges) == 0
    assert warmup_length(np.array([90.0] * 7 + [40.0]), 40.0, edges) == 64  # never settles in range
