-- stage_breakdown_scope.sql for requests that stand for others (requests.Weight, a head-sampled
-- run): the band bounds are weighted quantiles, and _ts_scope keeps each sampled request's Weight, by
-- which stage_breakdown_weighted.sql and stage_breakdown_counts_weighted.sql weigh its time (a sample
-- in which every request of the group is equally likely: weighted means estimate the population's).
-- window_fill is band_window_fill.sql, shared with stage_breakdown_scope.sql and the waterfall.
-- The requests whose spans the stage breakdown walks (tailscope.analysis.breakdown): a seeded sample
-- of up to N requests of the band and N of the median band ([q.45, q.55]), as the temp table
-- _ts_scope that span_tree.sql's "traces" scope reads. A band whose window falls between two requests
-- holds the first one above it, as in waterfall.sql. Params after the filter's: lo, hi, last band
-- (bool), N.
CREATE TEMP TABLE _ts_scope AS
WITH f AS NOT MATERIALIZED (
    SELECT TraceId, Duration, Weight FROM requests WHERE {where}
),
totals AS (
    SELECT sum(Weight) * (1 - 1e-12) AS total FROM f
),
q AS (  -- weighted quantiles, as waterfall_weighted.sql
    SELECT [min(c.Duration) FILTER (WHERE c.cw >= 0.45 * t.total),
            min(c.Duration) FILTER (WHERE c.cw >= 0.55 * t.total),
            min(c.Duration) FILTER (WHERE c.cw >= ? * t.total),
            min(c.Duration) FILTER (WHERE c.cw >= ? * t.total)]::DOUBLE[] AS qs
    FROM (SELECT Duration, sum(Weight) OVER (ORDER BY Duration ROWS UNBOUNDED PRECEDING) AS cw FROM f) AS c,
         totals AS t
),
{include:band_window_fill}
marked AS (
    SELECT f.TraceId, f.Weight,
           CASE WHEN (f.Duration >= q.qs[3]
                      AND (f.Duration < q.qs[4] OR ((? OR q.qs[3] = q.qs[4]) AND f.Duration <= q.qs[4])))
                     OR (w.inside = 0 AND f.Duration = w.first_above) THEN 'band'
                WHEN f.Duration BETWEEN q.qs[1] AND q.qs[2]
                     OR (w.median_inside = 0 AND f.Duration = w.nearest_median) THEN 'median' END AS grp
    FROM f, q, window_fill AS w
)
SELECT TraceId, grp, Weight FROM marked
WHERE grp IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY grp ORDER BY hash(TraceId)) <= ?
