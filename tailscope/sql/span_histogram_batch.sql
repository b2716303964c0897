-- One appended batch's spans counted into the write's delta (span_histogram_delta.sql):
-- `ingest_batch` is the batch's Arrow relation, as ingest_insert_spans.sql reads it.
INSERT INTO temp._ts_span_delta
SELECT CAST(RunLabel AS VARCHAR), SpanName,
{include:span_bucket} AS Bucket,
       count(*)
FROM ingest_batch
GROUP BY ALL
