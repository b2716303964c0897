-- stage_breakdown_scope.sql for requests that stand for others (tailscope_requests.Weight), as
-- ../stage_breakdown_scope_weighted.sql: the bounds given are weighted quantiles
-- (views.quantile_values), and each sampled request comes with its Weight, by which views.band_breakdown
-- weighs its time and counts it. Rows: TraceId, grp, Weight.
-- The requests whose spans the stage breakdown walks, as ../stage_breakdown_scope.sql: a sample of
-- up to N requests of the band and N of the median band (DuckDB: by its hash; the same requests when
-- N covers both groups). On ClickHouse the sample is taken from a few stretches of time, so that its
-- spans sit in few granules of otel_traces (tailscope.store.clickhouse.sample): each group's requests in
-- time order are cut into blocks of ceil(N/8) consecutive ones, and 8 blocks are drawn (by a hash of
-- their number): a cluster sample in which every request is equally likely, in time ranges where
-- the group is dense. A band whose window falls between two requests
-- holds the first one above it, an empty median band the request nearest the median.
-- Params after the filter's: p1 the bounds [q.45, q.55, lo, hi] (quantile_cont's values, from order
-- statistics: tailscope.analysis.quantiles), p2 last band (bool), p3 N. Rows: TraceId, grp.
WITH f AS (
    SELECT TraceId, Duration, Weight, toUnixTimestamp64Nano(Timestamp) AS StartNs FROM tailscope_requests WHERE {where}
),
window_fill AS (
    SELECT countIf(Duration >= qs[3] AND Duration < qs[4]) AS inside,
           minIf(Duration, Duration >= qs[3]) AS first_above,
           countIf(Duration >= qs[1] AND Duration <= qs[2]) AS median_inside,
           argMin(Duration, abs(Duration - (qs[1] + qs[2]) / 2)) AS nearest_median
    FROM f CROSS JOIN (SELECT {p1:Array(Float64)} AS qs) AS q
),
marked AS (
    SELECT f.TraceId AS TraceId, f.StartNs AS StartNs, f.Weight AS Weight,
           multiIf((f.Duration >= qs[3]
                    AND (f.Duration < qs[4] OR (({p2:Bool} OR qs[3] = qs[4]) AND f.Duration <= qs[4])))
                   OR (w.inside = 0 AND f.Duration = w.first_above), 'band',
                   (f.Duration >= qs[1] AND f.Duration <= qs[2])
                   OR (w.median_inside = 0 AND f.Duration = w.nearest_median), 'median', '') AS grp
    FROM f CROSS JOIN (SELECT {p1:Array(Float64)} AS qs) AS q CROSS JOIN window_fill AS w
),
grouped AS (
    SELECT TraceId, grp, StartNs, Weight FROM marked WHERE grp != ''
),
sampled AS (  -- each group's requests in time order (ties by trace id), cut into blocks of
                -- ceil(N/8) consecutive ones; 8 blocks drawn alike (by a hash of their number and the
                -- group's size): all of them when there are no more. In arrays, one pass over the
                -- groups (a window function and a second reference to it computed them twice or more)
    SELECT grp,
           arraySort(groupArray((StartNs, TraceId, Weight))) AS ordered,
           length(ordered) AS total,
           intDiv({p3:UInt64} + 7, 8) AS per_block,
           arraySlice(arraySort(b -> (cityHash64(b, grp, total), b),
                                range(intDiv(total + per_block - 1, per_block))), 1, 8) AS drawn
    FROM grouped
    GROUP BY grp
)
-- Every request of a group equally likely to be drawn (its block's chance: equal-size blocks drawn
-- alike), wherever its time: a burst that holds most of the tail holds most of the sample. A block
-- is a short stretch of time where the group is dense, so the sample's spans sit in few granules.
SELECT TraceId, grp, Weight FROM (
    SELECT grp, arrayJoin(arrayFlatten(
               arrayMap(b -> arraySlice(ordered, b * per_block + 1, per_block), drawn))) AS picked,
           tupleElement(picked, 2) AS TraceId, tupleElement(picked, 3) AS Weight
    FROM sampled
)
ORDER BY grp, cityHash64(TraceId), TraceId
LIMIT {p3:UInt64} BY grp
