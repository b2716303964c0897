-- Tail vs body's attribute rows on ClickHouse, once into a temporary table for tail_attributes.sql:
-- (trace, side, source, span name, key, value) of every span attribute of the sampled traces' spans
-- (with the span name), every resource attribute of the request root but tailscope's run label
-- (DuckDB: the RunLabel column), and the request's dominant stage. The sample comes as parameters
-- (tail_sample.sql's rows: s_ids, s_roots, s_stages, s_selected, s_root_ns); its spans from tail_spans.sql's
-- _ts_tail_spans, its roots' resource attributes from otel_traces: only the granules of the roots'
-- service and span name (the primary key's first two columns, from the spans of _ts_tail_spans that
-- start when a root does, s_root_ns: at 10 M spans 39 granules instead of 412, 0.28 -> 0.10 s) in
-- the seconds they start in ({seconds}, as there).
CREATE TEMPORARY TABLE _ts_tail_kv ENGINE = Memory AS
WITH
sample AS (
    SELECT x.1 AS TraceId, x.2 AS RootSpanId, x.3 AS DominantStage, x.4 AS selected
    FROM (SELECT arrayJoin(arrayZip({s_ids:Array(String)}, {s_roots:Array(String)},
                                    {s_stages:Array(String)}, {s_selected:Array(Bool)})) AS x)
),
sampled_spans AS (
    SELECT o.TraceId AS TraceId, s.selected AS selected, toString(o.SpanName) AS SpanName, o.SpanAttributes AS SA
    FROM _ts_tail_spans AS o
    INNER JOIN sample AS s ON o.TraceId = s.TraceId
),
roots AS (
    SELECT o.TraceId AS TraceId, s.selected AS selected, o.ResourceAttributes AS RA
    FROM (
        SELECT TraceId, SpanId, ResourceAttributes
        FROM otel_traces
        PREWHERE SpanId IN {s_roots:Array(String)}
        WHERE (ServiceName, SpanName) IN (
            SELECT ServiceName, SpanName FROM _ts_tail_spans
            WHERE (TraceId, StartNs) IN (SELECT tupleElement(r, 1), tupleElement(r, 2)
                                         FROM (SELECT arrayJoin(arrayZip({s_ids:Array(String)},
                                                                         {s_root_ns:Array(Int64)})) AS r)))
          AND {seconds}
          AND arrayAll((k, v) -> ResourceAttributes[k] = v, {run_filter_keys:Array(String)},
                       {run_filter_values:Array(String)})
    ) AS o
    INNER JOIN sample AS s ON o.TraceId = s.TraceId AND o.SpanId = s.RootSpanId
)
SELECT TraceId, selected, 'span' AS source, SpanName AS span_name, toString(k) AS key, v AS value
FROM sampled_spans ARRAY JOIN mapKeys(SA) AS k, mapValues(SA) AS v
UNION ALL
SELECT TraceId, selected, 'resource', '', toString(k), v
FROM roots ARRAY JOIN mapKeys(RA) AS k, mapValues(RA) AS v
WHERE k != 'tailscope.run'
UNION ALL
SELECT TraceId, selected, 'stage', '', 'dominant stage', DominantStage FROM sample
