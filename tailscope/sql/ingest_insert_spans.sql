-- Append one decoded batch (the Arrow table registered as `ingest_batch`) to a run. Duplicates are
-- removed afterwards for the whole file at once (dedupe_run.sql), which is cheaper than an anti-join
-- per batch. $1: run label.
INSERT INTO otel_traces
SELECT Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
       ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
       Events, Links, $1::VARCHAR AS RunLabel
FROM ingest_batch
