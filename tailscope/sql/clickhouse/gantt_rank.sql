-- Percentile rank (0..100, ties counted half) of each span's duration among the spans of the same
-- name in the run, as ../gantt_rank.sql. {scope}: the run's selection. Params: names, durations
-- (parallel arrays, one entry per span; i is 1-based).
WITH mine AS (
    SELECT i, {names:Array(String)}[i] AS SpanName, {durations:Array(Int64)}[i] AS d
    FROM (SELECT arrayJoin(arrayEnumerate({names:Array(String)})) AS i)
)
SELECT m.i AS i,
       100.0 * (countIf(toInt64(o.Duration) < m.d) + 0.5 * countIf(toInt64(o.Duration) = m.d)) / count() AS pct_rank
FROM {scope} AS o
JOIN mine AS m ON toString(o.SpanName) = m.SpanName
GROUP BY m.i
