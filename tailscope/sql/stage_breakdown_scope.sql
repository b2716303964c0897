-- The requests whose spans the stage breakdown walks (tailscope.analysis.breakdown): a seeded sample
-- of up to N requests of the band and N of the median band ([q.45, q.55]), as the temp table
-- _ts_scope that span_tree.sql's "traces" scope reads. A band whose window falls between two requests
-- holds the first one above it, as in waterfall.sql (window_fill: band_window_fill.sql, shared with it).
-- Params after the filter's: lo, hi, last band (bool), N.
CREATE TEMP TABLE _ts_scope AS
WITH f AS NOT MATERIALIZED (
    SELECT TraceId, Duration FROM requests WHERE {where}
),
q AS (
    SELECT quantile_cont(Duration, [0.45, 0.55, ?, ?]) AS qs FROM f
),
{include:band_window_fill}
marked AS (
    SELECT f.TraceId,
           CASE WHEN (f.Duration >= q.qs[3]
                      AND (f.Duration < q.qs[4] OR ((? OR q.qs[3] = q.qs[4]) AND f.Duration <= q.qs[4])))
                     OR (w.inside = 0 AND f.Duration = w.first_above) THEN 'band'
                WHEN f.Duration BETWEEN q.qs[1] AND q.qs[2]
                     OR (w.median_inside = 0 AND f.Duration = w.nearest_median) THEN 'median' END AS grp
    FROM f, q, window_fill AS w
)
SELECT TraceId, grp FROM marked
WHERE grp IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY grp ORDER BY hash(TraceId)) <= ?
