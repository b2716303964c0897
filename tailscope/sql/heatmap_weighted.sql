-- heatmap.sql for requests that stand for others (requests.Weight, a head-sampled run): counts are
-- sums of weights (rounded), the lines' p50 / p99 weighted quantiles per time bin (the smallest value
-- whose cumulative weight reaches q of the bin's total, less a relative 1e-12, as
-- waterfall_weighted.sql). Params and rows as heatmap.sql.
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
v AS (
    SELECT epoch_ns(Timestamp) AS t, Weight AS wt,
           CASE ? WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
                  WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
                  WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
                  WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
                  WHEN 'unattributed' THEN unattributed_ns ELSE Duration END AS ns
    FROM f
),
r AS (
    SELECT min(t) AS t0, greatest(1, CAST(ceil((max(t) - min(t) + 1) / CAST(? AS DOUBLE)) AS BIGINT)) AS w,
           CAST(? AS DOUBLE) AS bpd
    FROM v
),
binned AS (
    SELECT (v.t - r.t0) // r.w AS tb,
           CAST(floor(log10(greatest(v.ns, 1000) / 1e6) * r.bpd) AS INTEGER) AS lb,
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
