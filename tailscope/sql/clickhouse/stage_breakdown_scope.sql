-- The requests whose spans the stage breakdown walks, as ../stage_breakdown_scope.sql: a sample of
-- up to N requests of the band and N of the median band (DuckDB: by its hash; the same requests when
-- N covers both groups). On ClickHouse the sample is taken from a few stretches of time, so that its
-- spans sit in few granules of otel_traces (tailscope.store.ch_sample): the requests in blocks of
-- time sized to hold about N/4 of the smaller group's, blocks in the order of a hash of their
-- number (the same order for both groups: the median's sample lies in the band's first blocks), the
-- requests in a block by cityHash64(TraceId). A band whose window falls between two requests
-- holds the first one above it, an empty median band the request nearest the median.
-- Params after the filter's: p1 the bounds [q.45, q.55, lo, hi] (quantile_cont's values, from order
-- statistics: tailscope.analysis.quantiles), p2 last band (bool), p3 N. Rows: TraceId, grp.
WITH f AS (
    SELECT TraceId, Duration, toUnixTimestamp64Nano(Timestamp) AS StartNs FROM tailscope_requests WHERE {where}
),
window_fill AS (
    SELECT countIf(Duration >= qs[3] AND Duration < qs[4]) AS inside,
           minIf(Duration, Duration >= qs[3]) AS first_above,
           countIf(Duration >= qs[1] AND Duration <= qs[2]) AS median_inside,
           argMin(Duration, abs(Duration - (qs[1] + qs[2]) / 2)) AS nearest_median
    FROM f CROSS JOIN (SELECT {p1:Array(Float64)} AS qs) AS q
),
marked AS (
    SELECT f.TraceId AS TraceId, f.StartNs AS StartNs,
           multiIf((f.Duration >= qs[3]
                    AND (f.Duration < qs[4] OR (({p2:Bool} OR qs[3] = qs[4]) AND f.Duration <= qs[4])))
                   OR (w.inside = 0 AND f.Duration = w.first_above), 'band',
                   (f.Duration >= qs[1] AND f.Duration <= qs[2])
                   OR (w.median_inside = 0 AND f.Duration = w.nearest_median), 'median', '') AS grp
    FROM f CROSS JOIN (SELECT {p1:Array(Float64)} AS qs) AS q CROSS JOIN window_fill AS w
),
grouped AS (
    SELECT TraceId, grp, StartNs FROM marked WHERE grp != ''
),
sized AS (  -- blocks holding about N/4 requests of the smaller group: both groups' samples in ~4 of them
    SELECT greatest(toInt64(1000000000),
                    toInt64((max(StartNs) - min(StartNs)) * {p3:UInt64}
                            / (4 * greatest(1, least(countIf(grp = 'band'), countIf(grp = 'median')))))) AS block_ns
    FROM grouped
)
SELECT TraceId, grp FROM grouped CROSS JOIN sized
ORDER BY grp, cityHash64(intDiv(StartNs, block_ns)), cityHash64(TraceId), TraceId
LIMIT {p3:UInt64} BY grp
