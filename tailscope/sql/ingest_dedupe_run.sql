-- Keep one copy of each span in a run: the first one stored (lowest rowid), so re-ingesting a file
-- adds nothing and a file that repeats a span keeps its first copy. A span is identified by its ids
-- AND its timing, name and service, not by (TraceId, SpanId) alone: real exports carry distinct spans
-- that share an id (Jaeger's own UI fixture ui_01.json has two different spans with id ...0002), and
-- those are both kept. $1: run label.
DELETE FROM otel_traces
WHERE rowid IN (
    SELECT rowid
    FROM (
        SELECT rowid,
               row_number() OVER (
                   PARTITION BY TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName
                   ORDER BY rowid
               ) AS copy
        FROM otel_traces
        WHERE RunLabel = $1
    )
    WHERE copy > 1
)
