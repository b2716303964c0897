-- The requests whose spans the stage breakdown walks, as ../stage_breakdown_scope.sql: a sample of
-- up to N requests of the band and N of the median band, by cityHash64(TraceId) (DuckDB: its hash;
-- the same requests when N covers both groups). A band whose window falls between two requests
-- holds the first one above it, an empty median band the request nearest the median.
-- Params after the filter's: p1 the bounds [q.45, q.55, lo, hi] (quantile_cont's values, from order
-- statistics: tailscope.analysis.quantiles), p2 last band (bool), p3 N. Rows: TraceId, grp.
WITH f AS (
    SELECT TraceId, Duration FROM tailscope_requests WHERE {where}
),
window_fill AS (
    SELECT countIf(Duration >= qs[3] AND Duration < qs[4]) AS inside,
           minIf(Duration, Duration >= qs[3]) AS first_above,
           countIf(Duration >= qs[1] AND Duration <= qs[2]) AS median_inside,
           argMin(Duration, abs(Duration - (qs[1] + qs[2]) / 2)) AS nearest_median
    FROM f CROSS JOIN (SELECT {p1:Array(Float64)} AS qs) AS q
),
marked AS (
    SELECT f.TraceId AS TraceId,
           multiIf((f.Duration >= qs[3]
                    AND (f.Duration < qs[4] OR (({p2:Bool} OR qs[3] = qs[4]) AND f.Duration <= qs[4])))
                   OR (w.inside = 0 AND f.Duration = w.first_above), 'band',
                   (f.Duration >= qs[1] AND f.Duration <= qs[2])
                   OR (w.median_inside = 0 AND f.Duration = w.nearest_median), 'median', '') AS grp
    FROM f CROSS JOIN (SELECT {p1:Array(Float64)} AS qs) AS q CROSS JOIN window_fill AS w
)
SELECT TraceId, grp FROM marked
WHERE grp != ''
ORDER BY grp, cityHash64(TraceId), TraceId
LIMIT {p3:UInt64} BY grp
