-- Spans of one trace in one run (run, trace).
SELECT count(*) FROM otel_traces WHERE RunLabel = ? AND TraceId = ?
