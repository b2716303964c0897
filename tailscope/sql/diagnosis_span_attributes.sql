-- Diagnosis: the attributes of the spans of one name (to explain a slow mode, e.g. cache.hit=false,
-- or to read batch sizes), for at most 50,000 spans of it. SpanKey matches diagnosis_spans.sql.
-- Long values are skipped: an explanation needs a few repeated values.
-- Attributes are JSON text (schema.sql): json_each gives one row per key; `value ->> '$'` is the value as a string.
SELECT s.SpanKey, kv.key AS AttrKey, kv.value ->> '$' AS AttrValue
FROM (
    SELECT CAST(hash(TraceId, SpanId) >> 1 AS BIGINT) AS SpanKey, SpanAttributes
    FROM otel_traces WHERE RunLabel = $run AND SpanName = $span_name LIMIT 50000
) AS s, json_each(s.SpanAttributes) AS kv
WHERE length(kv.value ->> '$') <= 64
