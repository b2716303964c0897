-- Tail vs body's attribute rows on ClickHouse, once into a temporary table for tail_attributes.sql:
-- (trace, side, source, span name, key, value) of every span attribute of the sampled traces' spans
-- (with the span name), every resource attribute of the request root but tailscope's run label
-- (DuckDB: the RunLabel column), and the request's dominant stage. The sample comes as parameters
-- (tail_sample.sql's rows: s_ids, s_roots, s_stages, s_selected); its spans are read by trace id
-- (their span attributes) and its roots by span id (their resource attributes: the roots' granules
-- only), in the seconds they start in (the placeholder in the WHERE: fixed SQL from
-- tailscope.query.clickhouse.seconds_where, or 1 when the read is not bounded).
CREATE TEMPORARY TABLE _ts_tail_kv ENGINE = Memory AS
WITH
sample AS (
    SELECT x.1 AS TraceId, x.2 AS RootSpanId, x.3 AS DominantStage, x.4 AS selected
    FROM (SELECT arrayJoin(arrayZip({s_ids:Array(String)}, {s_roots:Array(String)},
                                    {s_stages:Array(String)}, {s_selected:Array(Bool)})) AS x)
),
sampled_spans AS (
    SELECT o.TraceId AS TraceId, s.selected AS selected, toString(o.SpanName) AS SpanName, o.SpanAttributes AS SA
    FROM (
        SELECT TraceId, SpanName, SpanAttributes
        FROM otel_traces PREWHERE TraceId IN {s_ids:Array(String)}
        WHERE {seconds}
    ) AS o
    INNER JOIN sample AS s ON o.TraceId = s.TraceId
),
roots AS (  -- the resource attributes of the roots only: their span names' granules, not every span's
    SELECT o.TraceId AS TraceId, s.selected AS selected, o.ResourceAttributes AS RA
    FROM (
        SELECT TraceId, SpanId, ResourceAttributes
        FROM otel_traces PREWHERE SpanId IN {s_roots:Array(String)} AND TraceId IN {s_ids:Array(String)}
        WHERE {seconds}
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
