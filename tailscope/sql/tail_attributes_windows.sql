-- Tail vs body, BubbleUp, over a large run's sample drawn from a few stretches of time
-- (tail_sample_windows.sql, staged as temp._ts_tail_sample by tailscope.store.duckdb.tail_sample):
-- the sampled traces' spans are read only within the windows around those stretches, so DuckDB
-- skips the other row groups of otel_traces by their Timestamp range instead of reading the run's
-- every TraceId. Params: the filter's (over the sample), the windows' bounds ({span_windows}: fixed
-- SQL of SPAN_WINDOWS pairs), then tail_attributes_body.sql's.
WITH sample AS (
    SELECT * FROM temp._ts_tail_sample WHERE {where}
),
spans_in_scope AS (
    SELECT * FROM otel_traces WHERE {span_windows}
),
{include:tail_attributes_body}
