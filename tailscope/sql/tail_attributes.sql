-- Tail vs body, BubbleUp: attribute values over-represented among the selected requests.
-- A seeded sample of up to N selected and N other requests (ordered by hash(TraceId)) keeps the scan of
-- otel_traces to the sampled traces. Dimensions: span attributes of every span of the trace (with
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
    SELECT RunLabel, TraceId, SpanId AS RootSpanId, DominantStage, selected
    FROM m
    QUALIFY row_number() OVER (PARTITION BY selected ORDER BY hash(TraceId)) <= ?
),
limits AS (
    SELECT ? AS max_values
),
sampled_spans AS MATERIALIZED (  -- one scan of otel_traces for both kinds of attributes

    SELECT s.TraceId, s.selected, o.SpanName, o.SpanAttributes,
           CASE WHEN o.SpanId = s.RootSpanId THEN o.ResourceAttributes END AS RootResource
    FROM otel_traces AS o JOIN sample AS s ON o.RunLabel = s.RunLabel AND o.TraceId = s.TraceId
    -- the same rows: a one-key semi join DuckDB filters the scan with (a bloom filter of the sample's
    -- ids), so only the sampled spans' attributes are read, not every span's of the run before the
    -- join (10 M spans, 2,000 sampled traces: 0.095 against 0.125-0.17 s of CPU)
    WHERE o.TraceId IN (SELECT TraceId FROM sample)
),
{include:tail_attribute_counts}
