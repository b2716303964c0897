-- Latency heatmap: counts per (time bin, log10 latency bin) of e2e latency or of one stage's time.
-- Params after the filter's: stage ('' for e2e), time bins, bins per decade.
-- Stage values below 1 us (a stage the request did not use) land in the 1 us bin.
-- Output rows: kind ('cell' | 'line'), time bin index, latency bin index (cells), count,
-- p50/p99 ns (lines), and the time origin / bin width in ns (same on every row).
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
v AS (
    SELECT epoch_ns(Timestamp) AS t,
{include:heatmap_bins}
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
