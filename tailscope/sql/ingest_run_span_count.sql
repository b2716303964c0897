-- Spans stored for one run. $1: run label.
SELECT count(*) FROM otel_traces WHERE RunLabel = $1
