-- Diagnosis: the attributes of the spans of one name (to explain a slow mode, e.g. cache.hit=false,
-- or to read batch and payload sizes), for at most 50,000 spans of it. SpanKey matches
-- diagnosis_spans.sql. Long values are skipped: an explanation needs a few repeated values.
-- A span's error status comes along as the attribute otel.status_code = 'Error' (a client deadline
-- that fired, a failed attempt before a retry).
-- {windows}: the spans starting in the read's time windows only (a sampled diagnosis; all time otherwise).
-- Attributes are JSON text (schema.sql): json_each gives one row per key; `value ->> '$'` is the value as a string.
WITH s AS (
    SELECT CAST(hash(TraceId, SpanId) >> 1 AS BIGINT) AS SpanKey, SpanAttributes, StatusCode
    FROM otel_traces WHERE RunLabel = $run AND SpanName = $span_name
      AND {windows}
    LIMIT 50000
)
SELECT s.SpanKey, kv.key AS AttrKey, kv.value ->> '$' AS AttrValue
FROM s, json_each(s.SpanAttributes) AS kv
WHERE length(kv.value ->> '$') <= 64
UNION ALL
SELECT SpanKey, 'otel.status_code' AS AttrKey, 'Error' AS AttrValue FROM s WHERE StatusCode = 'Error'
