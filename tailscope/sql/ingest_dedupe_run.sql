-- Keep one row per (TraceId, SpanId) in a run: the first one stored (lowest rowid), so re-ingesting
-- a file adds nothing and a file that repeats a span keeps its first copy. $1: run label.
DELETE FROM otel_traces
WHERE rowid IN (
    SELECT rowid
    FROM (
        SELECT rowid, row_number() OVER (PARTITION BY TraceId, SpanId ORDER BY rowid) AS copy
        FROM otel_traces
        WHERE RunLabel = $1
    )
    WHERE copy > 1
)
