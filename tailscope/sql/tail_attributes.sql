-- Tail vs body, BubbleUp: attribute values over-represented among the selected requests.
-- A seeded sample of up to N selected and N other requests (ordered by hash(TraceId)) keeps the scan of
-- otel_traces to the sampled traces. Dimensions: span attributes of every span of the trace (with
-- the span name), resource attributes of the request root, and the request's dominant stage. Keys
-- with more distinct values in the sample than the limit given (ids, free text) are left out.
-- Params: the filter's, tail_selection.sql's, then the sample size per side and the maximum
-- number of distinct values per key.
{include:tail_selection},
sample AS MATERIALIZED (
    SELECT RunLabel, TraceId, SpanId AS RootSpanId, DominantStage, selected
    FROM m
    QUALIFY row_number() OVER (PARTITION BY selected ORDER BY hash(TraceId)) <= ?
),
sampled_spans AS MATERIALIZED (  -- one scan of otel_traces for both kinds of attributes

    SELECT s.TraceId, s.selected, o.SpanName, o.SpanAttributes,
           CASE WHEN o.SpanId = s.RootSpanId THEN o.ResourceAttributes END AS RootResource
    FROM otel_traces AS o JOIN sample AS s ON o.RunLabel = s.RunLabel AND o.TraceId = s.TraceId
),
kv AS (  -- attributes are JSON text (schema.sql): json_each gives one row per key
    SELECT s.TraceId, s.selected, 'span' AS source, s.SpanName AS span_name,
           a.key AS key, a.value ->> '$' AS value
    FROM sampled_spans AS s, json_each(s.SpanAttributes) AS a
    UNION ALL
    SELECT s.TraceId, s.selected, 'resource', '', a.key, a.value ->> '$'
    FROM sampled_spans AS s, json_each(s.RootResource) AS a
    WHERE s.RootResource IS NOT NULL
    UNION ALL
    SELECT TraceId, selected, 'stage', '', 'dominant stage', DominantStage FROM sample
),
counted AS (
    SELECT source, span_name, key, value,
           count(DISTINCT TraceId) FILTER (WHERE selected) AS sel_n,
           count(DISTINCT TraceId) FILTER (WHERE NOT selected) AS rest_n
    FROM kv
    WHERE key <> 'tailscope.stage'
    GROUP BY source, span_name, key, value
),
keys AS (
    SELECT source, span_name, key FROM counted GROUP BY ALL HAVING count(*) <= ?
)
SELECT c.source, c.span_name, c.key, c.value, c.sel_n, c.rest_n,
       (SELECT count(*) FROM sample WHERE selected) AS sel_total,
       (SELECT count(*) FROM sample WHERE NOT selected) AS rest_total
FROM counted AS c SEMI JOIN keys AS k ON k.source = c.source AND k.span_name = c.span_name AND k.key = c.key
