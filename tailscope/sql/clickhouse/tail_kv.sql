-- Tail vs body's attribute rows on ClickHouse, once into a temporary table for tail_attributes.sql:
-- (trace, side, source, span name, key, value) of every span attribute of the sampled traces' spans
-- (with the span name), every resource attribute of the request root but tailscope's run label
-- (DuckDB: the RunLabel column), and the request's dominant stage. The sample comes as parameters
-- (tail_sample.sql's rows: s_ids, s_roots, s_stages, s_selected); its spans are read in one pass, by
-- trace id, in the seconds they start in (the placeholder in the WHERE: fixed SQL from
-- tailscope.query.clickhouse.seconds_where, or 1 when the read is not bounded).
CREATE TEMPORARY TABLE _ts_tail_kv ENGINE = Memory AS
WITH
sample AS (
    SELECT x.1 AS TraceId, x.2 AS RootSpanId, x.3 AS DominantStage, x.4 AS selected
    FROM (SELECT arrayJoin(arrayZip({s_ids:Array(String)}, {s_roots:Array(String)},
                                    {s_stages:Array(String)}, {s_selected:Array(Bool)})) AS x)
),
sampled_spans AS (
    SELECT o.TraceId AS TraceId, s.selected AS selected, toString(o.SpanName) AS SpanName,
           o.SpanAttributes AS SA, o.ResourceAttributes AS RA, o.SpanId = s.RootSpanId AS is_root
    FROM (
        SELECT TraceId, SpanId, SpanName, SpanAttributes, ResourceAttributes
        FROM otel_traces PREWHERE TraceId IN {s_ids:Array(String)}
        WHERE {seconds}
    ) AS o
    INNER JOIN sample AS s ON o.TraceId = s.TraceId
)
SELECT TraceId, selected, kv.1 AS source, kv.2 AS span_name, kv.3 AS key, kv.4 AS value
FROM sampled_spans
ARRAY JOIN arrayConcat(
    arrayMap((k, v) -> ('span', SpanName, toString(k), v), mapKeys(SA), mapValues(SA)),
    if(is_root,
       arrayFilter(x -> x.3 != 'tailscope.run',
                   arrayMap((k, v) -> ('resource', '', toString(k), v), mapKeys(RA), mapValues(RA))),
       [])) AS kv
UNION ALL
SELECT TraceId, selected, 'stage', '', 'dominant stage', DominantStage FROM sample
