-- Tail vs body, BubbleUp: attribute values over-represented among the selected requests.
-- A seeded sample of up to N selected and N other requests (ordered by hash(TraceId)) keeps the scan of
-- otel_traces to the sampled traces. Dimensions: span attributes of every span of the trace (with
-- the span name), resource attributes of the request root, and the request's dominant stage. Keys
-- with more distinct values in the sample than the limit given are binned when their values are
-- numbers (token counts, payload sizes: bins at the sample's 20/40/60/80/90th percentiles, e.g.
-- "≥ 1024"), and left out otherwise (ids, free text).
-- Params: the filter's, tail_selection.sql's, then the sample size per side and the maximum
-- number of distinct values per key. The rest of the statement (from the sample's spans on) is
-- tail_attributes_body.sql, shared with tail_attributes_windows.sql (a large run's sample).
{include:tail_selection},
sample AS MATERIALIZED (  -- the N smallest hash(TraceId) per side: one pass, a heap of N each
    -- (a row_number window sorted every request: 2x the time at 0.45 M requests)
    SELECT unnest(s, recursive := true)
    FROM (
        SELECT unnest(arg_min({'RunLabel': RunLabel, 'TraceId': TraceId, 'RootSpanId': SpanId,
                               'DominantStage': DominantStage, 'selected': selected}, hash(TraceId), ?)) AS s
        FROM m
        GROUP BY selected
    )
),
spans_in_scope AS (  -- where the sample's spans are read from: the run's (the join keeps its traces')
    SELECT * FROM otel_traces
),
{include:tail_attributes_body}
