-- One run's per-stage histograms (stage_histogram, schema.sql), by stage and bucket. Param: the run.
SELECT Stage, Bucket, Requests, Weight
FROM stage_histogram
WHERE RunLabel = ?
ORDER BY Stage, Bucket
