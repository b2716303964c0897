-- Latency heatmap: counts per (time bin, log10 latency bin) of e2e latency or of one stage's time.
-- Params after the filter's: stage ('' for e2e), time bins, bins per decade.
-- Stage values below 1 us (a stage the request did not use) land in the 1 us bin.
-- Output rows: kind ('cell' | 'line'), time bin index, latency bin index (cells), count,
-- p50/p99 ns (lines), and the time origin / bin width in ns (same on every row).
WITH f AS (
    SELECT * FROM requests WHERE RunLabel = ?
),
v AS (
    SELECT epoch_ns(Timestamp) AS t,
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
           v.ns
    FROM v, r
)
SELECT 'cell' AS kind, tb, lb, count(*) AS n, NULL AS p50_ns, NULL AS p99_ns,
       any_value(r.t0) AS t0, any_value(r.w) AS w
FROM binned, r
GROUP BY tb, lb
UNION ALL
SELECT 'line', tb, NULL, count(*), quantile_cont(ns, 0.5), quantile_cont(ns, 0.99), any_value(r.t0), any_value(r.w)
FROM binned, r
GROUP BY tb
-- params: ["r1", "model_forward", 60, 10]
