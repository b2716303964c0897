-- Diagnosis: the attributes of the spans of one name, as ../diagnosis_span_attributes.sql: at most
-- 50,000 spans of it (the earliest), values of at most 64 characters. SpanKey matches
-- diagnosis_spans.sql. {scope}: the run's selection. Param: span_name.
SELECT s.SpanKey AS SpanKey, k AS AttrKey, v AS AttrValue
FROM (
    SELECT toInt64(bitShiftRight(cityHash64(TraceId, SpanId), 1)) AS SpanKey, SpanAttributes
    FROM {scope}
    WHERE SpanName = {span_name:String}
    ORDER BY Timestamp, TraceId, SpanId
    LIMIT 50000
) AS s
ARRAY JOIN mapKeys(s.SpanAttributes) AS k, mapValues(s.SpanAttributes) AS v
WHERE lengthUTF8(v) <= 64
