-- Runs that have spans, sorted.
SELECT DISTINCT RunLabel FROM otel_traces ORDER BY RunLabel
