"""The ClickHouse sampled views draw their sample from a few stretches of time (so that it sits in
few granules of otel_traces), yet every request must stay about equally likely to be drawn: a tail
that a short burst concentrates is what tailscope exists to find, and a sample of equal-weight
stretches would mostly miss it. Here two thirds of the slowest 3 % fall in 2 % of the run's time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tailscope.analysis.types import Filter
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.clickhouse.quantiles import from_order_statistics
from tailscope.store.clickhouse.statements import filtered
from tailscope.store.engine import open_store

pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")

S = 1_000_000_000
START = 1_764_000_000 * S
# 20,000 requests, one every 50 ms over 1,000 s: the 400 of a 20 s burst at 500-520 s take 200 ms,
# 436 spread over the rest 100 ms, the others 10-18 ms. The slowest 3 % (600): 400 of the burst.
REQUESTS = f"""
INSERT INTO tailscope_requests (RunLabel, TraceId, SpanId, Timestamp, ServiceName, Route, Instance,
    Duration, IsError, ClientDuration, SpanCount, DominantStage, ingress_ns, queue_ns, parsing_ns,
    feature_hydration_ns, preprocessing_ns, model_forward_ns, postprocessing_ns, downstream_ns,
    serialization_ns, unattributed_ns)
SELECT 'burst', hex(cityHash64(number)), 'r', fromUnixTimestamp64Nano(toInt64({START} + number * {S // 20})),
       'svc', '/p', 'i', d, false, NULL, 1, 'queue', 0, d, 0, 0, 0, 0, 0, 0, 0, 0
FROM (
    SELECT number,
           multiIf(number >= 10000 AND number < 10400, 200000000 + number,
                   number % 45 = 7, 100000000 + number,
                   10000000 + (number % 9) * 1000000) AS d
    FROM numbers(20000)
)
"""
IN_BURST = (
    f"Timestamp >= fromUnixTimestamp64Nano(toInt64({START + 500 * S})) "
    f"AND Timestamp < fromUnixTimestamp64Nano(toInt64({START + 520 * S}))"
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ClickHouseStore]:
    opened = open_store(f"chdb://{tmp_path / 'ch'}", time_limit_s=30)
    assert isinstance(opened, ClickHouseStore)
    opened.prepare(writing=True)
    opened.query(REQUESTS)
    yield opened
    opened.close()


def test_breakdown_sample_draws_the_burst_as_often_as_its_share(store: ClickHouseStore) -> None:
    flt = Filter(run="burst")
    quantiles = (0.45, 0.55, 0.97, 1.0)
    text, params = filtered("order_statistics", flt, list(quantiles))
    pairs, n = store.query(text, params).rows[0]
    bounds = from_order_statistics(pairs, n, quantiles)
    text, params = filtered("stage_breakdown_scope", flt, bounds, True, 100)
    drawn = [trace for trace, grp in store.query(text, params).rows if grp == "band"]
    assert 40 <= len(drawn) <= 100
    share_sql = (
        "SELECT countIf({in_burst}) / count() FROM tailscope_requests "
        "WHERE RunLabel = 'burst' AND TraceId IN {{ids:Array(String)}}"
    )
    band_sql = (
        "SELECT countIf({in_burst}) / count() FROM tailscope_requests "
        "WHERE RunLabel = 'burst' AND Duration >= {{lo:Float64}}"
    )
    drawn_share = store.query(share_sql.format(in_burst=IN_BURST), {"ids": drawn}).rows[0][0]
    band_share = store.query(band_sql.format(in_burst=IN_BURST), {"lo": bounds[2]}).rows[0][0]
    assert 0.6 < band_share < 0.75  # the planted tail: two thirds of it the burst's
    assert abs(drawn_share - band_share) < 0.25, (drawn_share, band_share)


def test_tail_vs_body_sample_draws_the_burst_as_often_as_its_share(store: ClickHouseStore) -> None:
    flt = Filter(run="burst")
    text, params = filtered("order_statistics", flt, [0.97])
    pairs, n = store.query(text, params).rows[0]
    (threshold,) = from_order_statistics(pairs, n, (0.97,))
    # tail_selection.sql's params: stage ('' = e2e), threshold, no rectangle; then N per side
    text, params = filtered(
        "tail_sample", flt, "", threshold, False, None, None, None, None, 100
    )
    tail = [row[0] for row in store.query(text, params).rows if row[3]]
    share_sql = (
        f"SELECT countIf({IN_BURST}) / count() FROM tailscope_requests "
        "WHERE RunLabel = 'burst' AND TraceId IN {ids:Array(String)}"
    )
    assert len(tail) == 100
    # 8 of ~47 blocks: the share's standard error is ~0.15; equal-weight stretches drew 0 here
    assert abs(store.query(share_sql, {"ids": tail}).rows[0][0] - 400 / 600) < 0.3
