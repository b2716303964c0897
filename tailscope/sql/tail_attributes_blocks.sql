-- Tail vs body, BubbleUp, as tail_attributes.sql, over a block sample of a large selection
-- (tailscope.store.duckdb.tail_sample): the sampled requests are in temp._ts_tail_sample, taken from
-- a few stretches of time, so their spans are read only in the time windows around them ({windows}:
-- SPAN_WINDOWS windows in $from_ns / $to_ns, row groups outside every one skipped by their Timestamp
-- range) instead of by a scan of the run's trace ids. The counting is tail_attribute_counts.sql's.
-- Params: $from_ns, $to_ns, $max_values.
WITH sample AS MATERIALIZED (
    SELECT RunLabel, TraceId, RootSpanId, DominantStage, selected FROM temp._ts_tail_sample
),
limits AS (
    SELECT $max_values AS max_values
),
sampled_spans AS MATERIALIZED (
    SELECT s.TraceId, s.selected, o.SpanName, o.SpanAttributes,
           CASE WHEN o.SpanId = s.RootSpanId THEN o.ResourceAttributes END AS RootResource
    FROM otel_traces AS o JOIN sample AS s ON o.RunLabel = s.RunLabel AND o.TraceId = s.TraceId
    WHERE {windows} AND o.TraceId IN (SELECT TraceId FROM sample)
),
{include:tail_attribute_counts}
