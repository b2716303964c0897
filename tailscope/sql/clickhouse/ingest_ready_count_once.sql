-- How many spans ingest_ready_move_once.sql writes: a load's converted file, each span once.
-- Param: ready.
SELECT count() FROM (
    SELECT 1 FROM {ready:Identifier}
    LIMIT 1 BY TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName
)
