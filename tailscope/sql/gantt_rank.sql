-- Percentile rank (0..100, ties counted half) of each span's duration among the spans of the same
-- name in the run. Params: run, span names, durations (parallel lists, one entry per span).
WITH mine AS (
    SELECT unnest(?::VARCHAR[]) AS SpanName, unnest(?::BIGINT[]) AS d, generate_subscripts(?::BIGINT[], 1) AS i
)
SELECT m.i,
       100.0 * (count(*) FILTER (WHERE o.Duration < m.d) + 0.5 * count(*) FILTER (WHERE o.Duration = m.d))
           / count(*) AS pct_rank
FROM otel_traces AS o JOIN mine AS m ON o.SpanName = m.SpanName
WHERE o.RunLabel = ?
GROUP BY m.i
