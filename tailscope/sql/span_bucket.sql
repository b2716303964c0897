-- The bucket of a span's Duration (ns) in span_histogram (histogram_schema.sql) and in the Gantt's
-- ranks: floor(1000 ln ns), each bucket 0.1 % wide, -1 for 0 and below. The same expression on
-- ClickHouse (clickhouse/span_bucket.sql) and in tailscope.store.span_ranks.bucket.
CAST(CASE WHEN Duration > 0 THEN floor(ln(Duration) * 1000) ELSE -1 END AS INTEGER)
