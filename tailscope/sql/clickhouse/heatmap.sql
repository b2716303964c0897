-- Latency heatmap, as ../heatmap.sql: counts per (time bin, log10 latency bin) of e2e latency or of
-- one stage's time. Params: the filter's, p1 stage ('' for e2e), p2 time bins, p3 bins per decade.
-- Lines carry, instead of quantile_cont's p50 / p99, the two order statistics each reads
-- ([x[floor h], x[ceil h]], h = (n - 1)·q), interpolated by tailscope.analysis.quantiles.
-- Output rows: kind, time bin, latency bin (cells), count, p50 pair, p99 pair (lines), t0, width ns.
-- The time / log-latency bins (r, the head of binned): heatmap_bins.sql, shared with heatmap_weighted.sql.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
),
v AS (
    SELECT toInt64(toUnixTimestamp64Nano(Timestamp)) AS t,
           toInt64({include:stage_value}) AS ns
    FROM f
),
{include:heatmap_bins}
           v.ns AS ns, r.t0 AS t0, r.w AS w
    FROM v CROSS JOIN r
)
SELECT 'cell' AS kind, tb, toNullable(lb) AS lb, count() AS n,
       CAST([], 'Array(Int64)') AS p50_pair, CAST([], 'Array(Int64)') AS p99_pair, any(t0) AS t0, any(w) AS w
FROM binned
GROUP BY tb, lb
UNION ALL
SELECT 'line', tb, CAST(NULL, 'Nullable(Int32)'), length(s),
       [s[toUInt64(floor((length(s) - 1) * 0.5)) + 1], s[toUInt64(ceil((length(s) - 1) * 0.5)) + 1]],
       [s[toUInt64(floor((length(s) - 1) * 0.99)) + 1], s[toUInt64(ceil((length(s) - 1) * 0.99)) + 1]],
       t0, w
FROM (SELECT tb, arraySort(groupArray(ns)) AS s, any(t0) AS t0, any(w) AS w FROM binned GROUP BY tb)
