-- Tail vs body, BubbleUp: attribute values over-represented among the selected requests.
-- A seeded sample of up to N selected and N other requests (ordered by hash(TraceId)) keeps the read of
-- otel_traces to the sampled traces' spans, found by their start times (below). Dimensions: span
-- attributes of every span of the trace (with
-- the span name), resource attributes of the request root, and the request's dominant stage. Keys
-- with more distinct values in the sample than the limit given are binned when their values are
-- numbers (token counts, payload sizes: bins at the sample's 20/40/60/80/90th percentiles, e.g.
-- "≥ 1024"), and left out otherwise (ids, free text).
-- A large selection's sample is taken in blocks instead (tail_attributes_blocks.sql,
-- tailscope.store.duckdb.tail_sample). The counting is tail_attribute_counts.sql's.
-- Params: the filter's, tail_selection.sql's, then the sample size per side and the maximum
-- number of distinct values per key.
{include:tail_selection},
sample AS MATERIALIZED (
    SELECT RunLabel, TraceId, SpanId AS RootSpanId, DominantStage, selected, SpanStarts
    FROM m
    QUALIFY row_number() OVER (PARTITION BY selected ORDER BY hash(TraceId)) <= ?
),
limits AS (
    SELECT ? AS max_values
),
-- The sampled traces' spans, found by their start times (requests.SpanStarts, kept by the derive):
-- DuckDB filters the scan of otel_traces with a bloom filter of the sample's start times on
-- Timestamp, so only the spans that start at one of them are read (the sampled ones, and another
-- trace's span that starts in the same nanosecond, which the join below drops), not every span's
-- TraceId of the run, nor the attributes of every vector a sampled span lies in (a route's sample at
-- 10 M spans: ~0.09 against ~0.26 s of CPU; bench/RESULTS.md "Scale: a sampled trace's spans found by
-- their start times"). Materialized, so that the join's own filter on TraceId is not pushed into
-- that scan too (a second probe of every row). Requests derived before version 6 (SpanStarts NULL)
-- are found by their TraceId as before: a one-key semi join DuckDB filters the scan with (a bloom
-- filter of their ids), skipped when there are none.
starts AS MATERIALIZED (
    SELECT DISTINCT make_timestamp_ns(unnest(SpanStarts)) AS Timestamp FROM sample
),
at_starts AS MATERIALIZED (
    SELECT RunLabel, TraceId, SpanId, SpanName, SpanAttributes, ResourceAttributes
    FROM otel_traces WHERE Timestamp IN (SELECT Timestamp FROM starts)
),
sampled_spans AS MATERIALIZED (
    SELECT s.TraceId, s.selected, o.SpanName, o.SpanAttributes,
           CASE WHEN o.SpanId = s.RootSpanId THEN o.ResourceAttributes END AS RootResource
    FROM at_starts AS o JOIN sample AS s ON o.RunLabel = s.RunLabel AND o.TraceId = s.TraceId
    WHERE s.SpanStarts IS NOT NULL
    UNION ALL
    SELECT s.TraceId, s.selected, o.SpanName, o.SpanAttributes,
           CASE WHEN o.SpanId = s.RootSpanId THEN o.ResourceAttributes END AS RootResource
    FROM otel_traces AS o JOIN sample AS s ON o.RunLabel = s.RunLabel AND o.TraceId = s.TraceId
    WHERE s.SpanStarts IS NULL AND o.TraceId IN (SELECT TraceId FROM sample WHERE SpanStarts IS NULL)
),
{include:tail_attribute_counts}
