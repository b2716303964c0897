-- Dedupe's copies (ingest_dedupe_copies.sql) taken away from the write's span counts, then dropped
-- once deleted (span_histogram.py runs this before the delete).
INSERT INTO temp._ts_span_delta
SELECT RunLabel, SpanName,
{include:span_bucket} AS Bucket,
       -count(*)
FROM temp._ts_copies
GROUP BY ALL
