"""The Gantt's rank of a span's duration among the run's spans of its name, from per-run counts by
duration bucket (issue 29), on both engines.

The exact rank (gantt_rank.sql: shorter spans counted whole, equal ones half, over the name's spans)
reads every span of the run: 0.2-0.4 s of CPU at 5-15 M spans, growing with the run. A run of at
least MIN_SPANS spans is ranked instead from its spans' counts per (span name, bucket): buckets
floor(BUCKETS_PER_LN × ln ns), 0.1 % wide (span_bucket.sql); the spans of lower buckets counted
whole, those of the span's own bucket half. The stated error: the exact rank lies within
50 × (the bucket's spans / the name's spans) points of it (those spans are the only ones counted
wrongly, by at most a half each), ≤ 0.1 point on the scale bench's runs (tests/test_span_ranks.py).
DuckDB keeps the counts as its writes go (tailscope.store.duckdb.span_histogram); ClickHouse counts
its sorted span durations by the same buckets (tailscope.store.clickhouse.span_durations)."""

from __future__ import annotations

import math

BUCKETS_PER_LN = 1000
MIN_SPANS = 1_000_000  # smaller runs: the exact rank (~20 ms at this size)


def bucket(duration_ns: int) -> int:
    """span_bucket.sql's bucket of one duration (ns)."""
    return math.floor(math.log(duration_ns) * BUCKETS_PER_LN) if duration_ns > 0 else -1


def error_bound(bucket_spans: int, name_spans: int) -> float:
    """How far (points) a bucketed rank may lie from the exact one: the bucket's spans counted half."""
    return 50.0 * bucket_spans / name_spans if name_spans else 0.0
