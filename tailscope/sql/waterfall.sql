-- Waterfall of one percentile band. Bands are quantile windows of e2e latency (types.BAND_QUANTILES):
-- the band is Duration in [q(lo), q(hi)), or [q(lo), max] for the last band; the median band is
-- [q(0.45), q(0.55)]. A band whose bounds coincide (few requests) holds the requests at that latency. Quantiles are quantile_cont (linear interpolation, as numpy's default).
-- Params after the filter's: lo, hi, last_band (bool).
-- Output: one row. stage columns come out in table order (ALL_STAGES) via COLUMNS('_ns$'):
--   n, band_n, median_n, q_lo, q_hi, band_mean, median_mean,
--   band_<stage>... (avg ns), median_<stage>... (avg ns). Stage percentiles: stage_percentiles.sql
-- (kept apart: ten exact quantiles cost most of a waterfall, and the overview needs none).
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
q AS (
    SELECT quantile_cont(Duration, [0.45, 0.55, ?, ?]) AS qs, count(*) AS n FROM f
),
{include:waterfall_marked}
SELECT
    any_value(q.n) AS n,
    count(*) FILTER (WHERE in_band) AS band_n,
    count(*) FILTER (WHERE in_median) AS median_n,
    any_value(q.qs[3]) AS q_lo,
    any_value(q.qs[4]) AS q_hi,
    avg(Duration) FILTER (WHERE in_band) AS band_mean,
    avg(Duration) FILTER (WHERE in_median) AS median_mean,
    avg(COLUMNS('_ns$')) FILTER (WHERE in_band) AS "band_\0",
    avg(COLUMNS('_ns$')) FILTER (WHERE in_median) AS "median_\0"
FROM marked, q
