-- Tail vs body's attribute counts (included by tail_attributes.sql and tail_attributes_blocks.sql
-- after their CTEs `sample` (RunLabel, TraceId, RootSpanId, DominantStage, selected), `limits`
-- (max_values) and `sampled_spans` (the sampled traces' spans: TraceId, selected, SpanName,
-- SpanAttributes, RootResource)): per (source, span name, key, value), how many sampled traces of
-- each side have it.
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
numeric_keys AS (  -- numbers with more distinct values than the limit (token counts, sizes): binned
    SELECT source, span_name, key,
           list_distinct(quantile_disc(try_cast(value AS DOUBLE), [0.2, 0.4, 0.6, 0.8, 0.9])) AS edges
    FROM kv
    WHERE key <> 'tailscope.stage'
    GROUP BY source, span_name, key
    HAVING count(DISTINCT value) > (SELECT max_values FROM limits)
       AND count(try_cast(value AS DOUBLE)) >= 0.95 * count(*)
),
numeric_labels AS (
    SELECT *, list_transform(list_sort(edges), lambda e: CASE WHEN e = round(e) THEN CAST(CAST(e AS BIGINT) AS VARCHAR)
                                                    ELSE CAST(round(e, 3) AS VARCHAR) END) AS labels,
           list_sort(edges) AS sorted_edges
    FROM numeric_keys
),
binned AS (
    SELECT kv.TraceId, kv.selected, kv.source, kv.span_name, kv.key,
           CASE WHEN n.labels IS NULL THEN kv.value
                ELSE (SELECT CASE WHEN b = 0 THEN '< ' || n.labels[1]
                                  WHEN b = len(n.labels) THEN '≥ ' || n.labels[b]
                                  ELSE n.labels[b] || ' – ' || n.labels[b + 1] END
                      FROM (SELECT len(list_filter(n.sorted_edges, lambda e: e <= try_cast(kv.value AS DOUBLE))) AS b))
           END AS value
    FROM kv LEFT JOIN numeric_labels AS n
        ON n.source = kv.source AND n.span_name = kv.span_name AND n.key = kv.key
    WHERE n.labels IS NULL
       -- a numeric attribute named as a time (vLLM's gen_ai.latency.*, TGI's queue_time, a
       -- duration_ms) restates latency, which the stage comparison already splits: left out
       OR (try_cast(kv.value AS DOUBLE) IS NOT NULL
           AND NOT regexp_matches(kv.key, '(latency|duration|elapsed|e2e|_time$|time_(in|to|per)_)', 'i'))
),
counted AS (
    SELECT source, span_name, key, value,
           count(DISTINCT TraceId) FILTER (WHERE selected) AS sel_n,
           count(DISTINCT TraceId) FILTER (WHERE NOT selected) AS rest_n
    FROM binned
    WHERE key <> 'tailscope.stage'
    GROUP BY source, span_name, key, value
),
keys AS (
    SELECT source, span_name, key FROM counted GROUP BY ALL HAVING count(*) <= (SELECT max_values FROM limits)
)
SELECT c.source, c.span_name, c.key, c.value, c.sel_n, c.rest_n,
       (SELECT count(*) FROM sample WHERE selected) AS sel_total,
       (SELECT count(*) FROM sample WHERE NOT selected) AS rest_total
FROM counted AS c SEMI JOIN keys AS k ON k.source = c.source AND k.span_name = c.span_name AND k.key = c.key
