-- waterfall.sql for requests that stand for others (requests.Weight, a head-sampled run): the same
-- row, every figure an estimate for the population the sample was drawn from. Band bounds are
-- weighted quantiles: the smallest Duration whose cumulative weight (in Duration order) reaches q of
-- the total (q·total less a relative 1e-12, so that float sums in another order agree); counts are
-- sums of weights (rounded), means weighted means sum(w·x) / sum(w). Read waterfall.sql's notes.
-- Params after the filter's: lo, hi, last_band (bool), as waterfall.sql.
-- Band membership (window_fill, marked) is waterfall_marked.sql, shared with waterfall.sql.
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
totals AS (
    SELECT sum(Weight) AS total FROM f
),
cumulative AS (
    SELECT Duration, sum(Weight) OVER (ORDER BY Duration ROWS UNBOUNDED PRECEDING) AS cw FROM f
),
q AS (
    SELECT [min(c.Duration) FILTER (WHERE c.cw >= 0.45 * t.total * (1 - 1e-12)),
            min(c.Duration) FILTER (WHERE c.cw >= 0.55 * t.total * (1 - 1e-12)),
            min(c.Duration) FILTER (WHERE c.cw >= ? * t.total * (1 - 1e-12)),
            min(c.Duration) FILTER (WHERE c.cw >= ? * t.total * (1 - 1e-12))]::DOUBLE[] AS qs,
           CAST(round(any_value(t.total)) AS BIGINT) AS n
    FROM cumulative AS c, totals AS t
),
{include:waterfall_marked}
SELECT
    any_value(q.n) AS n,
    CAST(round(coalesce(sum(Weight) FILTER (WHERE in_band), 0)) AS BIGINT) AS band_n,
    CAST(round(coalesce(sum(Weight) FILTER (WHERE in_median), 0)) AS BIGINT) AS median_n,
    any_value(q.qs[3]) AS q_lo,
    any_value(q.qs[4]) AS q_hi,
    sum(Weight * Duration) FILTER (WHERE in_band) / sum(Weight) FILTER (WHERE in_band) AS band_mean,
    sum(Weight * Duration) FILTER (WHERE in_median) / sum(Weight) FILTER (WHERE in_median) AS median_mean,
    sum(Weight * COLUMNS('_ns$')) FILTER (WHERE in_band) / sum(Weight) FILTER (WHERE in_band) AS "band_\0",
    sum(Weight * COLUMNS('_ns$')) FILTER (WHERE in_median) / sum(Weight) FILTER (WHERE in_median) AS "median_\0"
FROM marked, q
