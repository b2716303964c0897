-- Whether the spans a transaction touched hold any (TraceId, SpanId) twice within the run: only
-- then can ingest_dedupe_run.sql find a copy to delete (a copy repeats these ids), and its window
-- over the touched traces costs ~4x this hash count (measured, 1 M spans: 0.37-0.43 s against
-- 0.06 s). A hash collision only makes this say yes, and the delete then finds nothing. Same scope
-- and parameters as the delete: $1 run label, $2/$3 the batch's first and last span start (ns).
SELECT count(*) > count(DISTINCT hash(TraceId, SpanId))
FROM otel_traces
WHERE RunLabel = $1
  AND Timestamp BETWEEN make_timestamp_ns($2::BIGINT) AND make_timestamp_ns($3::BIGINT)
  AND TraceId IN (SELECT TraceId FROM ingest_touched)
