-- Spans of a run appended since the high-water mark (run, rowid).
SELECT count(*) FROM otel_traces WHERE RunLabel = ? AND rowid > ?
