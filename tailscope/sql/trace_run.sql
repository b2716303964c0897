-- The run a trace belongs to (the first by label when several hold it).
SELECT min(RunLabel) FROM otel_traces WHERE TraceId = ?
