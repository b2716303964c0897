-- Diagnosis: the attributes of the spans of one name (to explain a slow mode, e.g. cache.hit=false,
-- or to read batch sizes), for at most 50,000 spans of it. SpanKey matches diagnosis_spans.sql.
-- Long values are skipped: an explanation needs a few repeated values.
SELECT SpanKey, kv.key AS AttrKey, kv.value AS AttrValue
FROM (
    SELECT CAST(hash(TraceId, SpanId) >> 1 AS BIGINT) AS SpanKey, unnest(map_entries(SpanAttributes)) AS kv
    FROM (SELECT * FROM otel_traces WHERE RunLabel = $run AND SpanName = $span_name LIMIT 50000)
)
WHERE length(kv.value) <= 64
