-- Diagnosis: the attributes of the spans of one name, as ../diagnosis_span_attributes.sql: at most
-- 50,000 spans of it (the earliest), values of at most 64 characters, a span's error status as the
-- attribute otel.status_code = 'Error'. SpanKey matches diagnosis_spans.sql. {scope}: the run's
-- selection. Param: span_name.
SELECT s.SpanKey AS SpanKey, k AS AttrKey, v AS AttrValue
FROM (
    SELECT toInt64(bitShiftRight(cityHash64(TraceId, SpanId), 1)) AS SpanKey,
           if(toString(StatusCode) = 'Error',
              mapUpdate(SpanAttributes, map('otel.status_code', 'Error')), SpanAttributes) AS Attrs
    FROM {scope}
    WHERE SpanName = {span_name:String}
    ORDER BY Timestamp, TraceId, SpanId
    LIMIT 50000
) AS s
ARRAY JOIN mapKeys(s.Attrs) AS k, mapValues(s.Attrs) AS v
WHERE lengthUTF8(v) <= 64
