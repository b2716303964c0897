-- ../heatmap_weighted.sql on ClickHouse: counts are sums of weights (rounded), the lines carry the
-- weighted p50 / p99 themselves (values, not the unweighted file's order-statistic pairs:
-- tailscope.store.clickhouse.views.heatmap tells them apart). Params and rows as heatmap.sql.
-- The time / log-latency bins (r, the head of binned) are heatmap_bins.sql, shared with heatmap.sql.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
),
v AS (
    SELECT toInt64(toUnixTimestamp64Nano(Timestamp)) AS t,
           toInt64({include:stage_value}) AS ns, Weight AS wt
    FROM f
),
{include:heatmap_bins}
           v.ns AS ns, v.wt AS wt, r.t0 AS t0, r.w AS w
    FROM v CROSS JOIN r
)
SELECT 'cell' AS kind, tb, toNullable(lb) AS lb, toInt64(round(sum(wt))) AS n,
       CAST([], 'Array(Float64)') AS p50, CAST([], 'Array(Float64)') AS p99, any(t0) AS t0, any(w) AS w
FROM binned
GROUP BY tb, lb
UNION ALL
SELECT 'line', tb, CAST(NULL, 'Nullable(Int32)'), toInt64(round(total)),
       [toFloat64(arrayMap(p -> p.1, s)[arrayFirstIndex(c -> c >= 0.5 * total * (1 - 1e-12), cs)])],
       [toFloat64(arrayMap(p -> p.1, s)[arrayFirstIndex(c -> c >= 0.99 * total * (1 - 1e-12), cs)])],
       t0, w
FROM (SELECT tb, arraySort(groupArray((ns, wt))) AS s, arrayCumSum(arrayMap(p -> p.2, s)) AS cs,
             sum(wt) AS total, any(t0) AS t0, any(w) AS w
      FROM binned GROUP BY tb)
