-- gantt_rank.sql from span_histogram (a run of at least span_ranks.MIN_SPANS spans whose rows count
-- them all): each span's rank (0..100) among the run's spans of its name, those of lower buckets
-- counted whole and those of its own bucket half (the bucket's middle). Within 50 × (its bucket's
-- spans / the name's spans) points of the exact rank (tailscope.store.span_ranks). Reads the run's
-- rows of the trace's span names (their distinct buckets, not their spans).
-- Params: span names, durations, durations (parallel lists), run.
WITH mine AS (
    SELECT unnest(?::VARCHAR[]) AS SpanName, unnest(?::BIGINT[]) AS Duration,
           generate_subscripts(?::BIGINT[], 1) AS i
),
asked AS (
    SELECT i, SpanName,
{include:span_bucket} AS b
    FROM mine
)
SELECT a.i,
       100.0 * (coalesce(sum(h.Spans) FILTER (WHERE h.Bucket < a.b), 0)
                + 0.5 * coalesce(sum(h.Spans) FILTER (WHERE h.Bucket = a.b), 0)) / sum(h.Spans) AS pct_rank
FROM span_histogram AS h JOIN asked AS a ON h.SpanName = a.SpanName
WHERE h.RunLabel = ?
GROUP BY a.i
