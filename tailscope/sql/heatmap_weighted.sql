-- heatmap.sql for requests that stand for others (requests.Weight, a head-sampled run): counts are
-- sums of weights (rounded), the lines' p50 / p99 weighted quantiles per time bin (the smallest value
-- whose cumulative weight reaches q of the bin's total, less a relative 1e-12, as
-- waterfall_weighted.sql). Params and rows as heatmap.sql.
-- The stage value and the time / log-latency bins are heatmap_bins.sql, shared with heatmap.sql
-- (the v, r and binned CTEs but for the weight column each carries here).
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
v AS (
    SELECT epoch_ns(Timestamp) AS t, Weight AS wt,
{include:heatmap_bins}
           v.ns, v.wt
    FROM v, r
),
cumulative AS (
    SELECT tb, ns, sum(wt) OVER (PARTITION BY tb ORDER BY ns ROWS UNBOUNDED PRECEDING) AS cw,
           sum(wt) OVER (PARTITION BY tb) AS total
    FROM binned
)
SELECT 'cell' AS kind, tb, lb, CAST(round(sum(wt)) AS BIGINT) AS n, NULL AS p50_ns, NULL AS p99_ns,
       any_value(r.t0) AS t0, any_value(r.w) AS w
FROM binned, r
GROUP BY tb, lb
UNION ALL
SELECT 'line', tb, NULL, CAST(round(any_value(total)) AS BIGINT),
       min(ns) FILTER (WHERE cw >= 0.5 * total * (1 - 1e-12))::DOUBLE,
       min(ns) FILTER (WHERE cw >= 0.99 * total * (1 - 1e-12))::DOUBLE, any_value(r.t0), any_value(r.w)
FROM cumulative, r
GROUP BY tb
