-- A write's delta (span_histogram_delta.sql) added into span_histogram for the run $run: the touched
-- (name, bucket) rows summed with it, written back, empty ones dropped. Reads only the run's
-- span_histogram rows, never otel_traces: its cost follows the write and the run's distinct
-- (name, bucket) pairs, not its spans.
CREATE OR REPLACE TEMP TABLE _ts_span_merged AS
SELECT RunLabel, SpanName, Bucket, sum(Spans) AS Spans
FROM (
    SELECT * FROM span_histogram
    WHERE RunLabel = $run AND (SpanName, Bucket) IN (SELECT (SpanName, Bucket) FROM temp._ts_span_delta)
    UNION ALL BY NAME
    SELECT * FROM temp._ts_span_delta WHERE RunLabel = $run
)
GROUP BY RunLabel, SpanName, Bucket;
DELETE FROM span_histogram
WHERE RunLabel = $run AND (SpanName, Bucket) IN (SELECT (SpanName, Bucket) FROM temp._ts_span_delta);
INSERT INTO span_histogram BY NAME SELECT * FROM temp._ts_span_merged WHERE Spans <> 0;
DROP TABLE temp._ts_span_merged
