-- A run's span_histogram rows built again from all its spans (a run written before the table
-- existed, or whose rows do not count its spans). Params: the run, twice.
DELETE FROM span_histogram WHERE RunLabel = $run;
INSERT INTO span_histogram
SELECT RunLabel, SpanName,
{include:span_bucket} AS Bucket,
       count(*)
FROM otel_traces
WHERE RunLabel = $run
GROUP BY ALL
