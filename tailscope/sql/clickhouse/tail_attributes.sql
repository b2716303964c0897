-- Tail vs body, BubbleUp, as ../tail_attributes.sql: attribute values over-represented among the
-- selected requests, over a sample of up to N selected and N other requests (tail_sample.sql, asked
-- for first: from a few stretches of time; another sample than DuckDB's hash(TraceId) picks, the
-- same when N covers every request). Dimensions: span attributes of every span of the trace (Map
-- SpanAttributes, with the span name), resource attributes of the request root, the request's
-- dominant stage: the (trace, side, source, span name, key, value) rows of tail_kv.sql, read once
-- into _ts_tail_kv (each reference to a CTE over otel_traces would read it again). Keys with more
-- distinct values than the limit are binned when their values are numbers (edges: quantile_disc at
-- 0.2 / 0.4 / 0.6 / 0.8 / 0.9, i.e. x[ceil(n·q)]), and left out otherwise.
-- Params: max_values (the maximum number of distinct values per key), s_selected (the sample's sides).
WITH
numeric_keys AS (  -- numbers with more distinct values than the limit (token counts, sizes): binned
    SELECT source, span_name, key, 1 AS numeric,
           arraySort(arrayDistinct(arrayMap(q -> x[greatest(toUInt64(ceil(length(x) * q)), 1)],
                                            [0.2, 0.4, 0.6, 0.8, 0.9]))) AS edges,
           arrayMap(e -> if(e = round(e), toString(toInt64(e)), toString(round(e, 3))), edges) AS labels
    FROM (
        SELECT source, span_name, key, arraySort(groupArray(toFloat64OrNull(value))) AS x,
               uniqExact(value) AS distinct_values, count() AS values_n
        FROM _ts_tail_kv AS kv
        WHERE key <> 'tailscope.stage'
        GROUP BY source, span_name, key
    )
    WHERE distinct_values > {max_values:UInt64} AND length(x) >= 0.95 * values_n
),
joined AS (  -- a key that is not binned joins no numeric_keys row: numeric 0, no edges
    SELECT kv.TraceId AS TraceId, kv.selected AS selected, kv.source AS source, kv.span_name AS span_name,
           kv.key AS key, kv.value AS raw, n.numeric AS numeric, n.labels AS labels,
           length(arrayFilter(e -> e <= toFloat64OrNull(kv.value), n.edges)) AS b
    FROM _ts_tail_kv AS kv LEFT JOIN numeric_keys AS n
        ON n.source = kv.source AND n.span_name = kv.span_name AND n.key = kv.key
),
binned AS (
    SELECT TraceId, selected, source, span_name, key,
           if(ifNull(numeric, 0) = 0, raw,
              multiIf(b = 0, concat('< ', labels[1]),
                      b = length(labels), concat('≥ ', labels[b]),
                      concat(labels[b], ' – ', labels[b + 1]))) AS value
    FROM joined
    WHERE ifNull(numeric, 0) = 0
       -- a numeric attribute named as a time (vLLM's gen_ai.latency.*, TGI's queue_time, a
       -- duration_ms) restates latency, which the stage comparison already splits: left out
       OR (toFloat64OrNull(raw) IS NOT NULL
           AND NOT match(key, '(?i)(latency|duration|elapsed|e2e|_time$|time_(in|to|per)_)'))
),
counted AS (
    SELECT source, span_name, key, value,
           uniqExactIf(TraceId, selected) AS sel_n,
           uniqExactIf(TraceId, NOT selected) AS rest_n
    FROM binned
    WHERE key <> 'tailscope.stage'
    GROUP BY source, span_name, key, value
),
keys AS (
    SELECT source, span_name, key FROM counted GROUP BY source, span_name, key HAVING count() <= {max_values:UInt64}
)
SELECT source, span_name, key, value, sel_n, rest_n,
       arrayCount(x -> x, {s_selected:Array(Bool)}) AS sel_total,
       arrayCount(x -> NOT x, {s_selected:Array(Bool)}) AS rest_total
FROM counted
WHERE (source, span_name, key) IN (SELECT source, span_name, key FROM keys)
