-- One run's e2e histogram (request_histogram, schema.sql), by bucket, for tailscope.analysis.histogram.
-- Param: the run.
SELECT Bucket, Requests, Weight, Errors, DurationNs, COLUMNS('_ns$')
FROM request_histogram
WHERE RunLabel = ?
ORDER BY Bucket
