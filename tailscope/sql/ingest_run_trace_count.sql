-- The exact number of distinct traces in a run (a scan of its TraceId column). $1: run label.
SELECT count(DISTINCT TraceId) FROM otel_traces WHERE RunLabel = $1
