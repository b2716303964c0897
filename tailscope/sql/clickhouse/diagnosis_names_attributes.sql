-- Diagnosis: the attributes of the spans of several names at once, as ../diagnosis_names_attributes.sql
-- (one read for `span_names`; at most 50,000 spans of each name, the earliest, as
-- diagnosis_span_attributes.sql reads one name's: load.py reads a name alone where DuckDB found more); values of at most 64 characters, a
-- span's error status as the attribute otel.status_code = 'Error'. {scope}: the run's selection.
SELECT s.SpanName AS SpanName, s.SpanKey AS SpanKey, k AS AttrKey, v AS AttrValue
FROM (
    SELECT SpanName, toInt64(bitShiftRight(cityHash64(TraceId, SpanId), 1)) AS SpanKey,
           if(toString(StatusCode) = 'Error',
              mapUpdate(SpanAttributes, map('otel.status_code', 'Error')), SpanAttributes) AS Attrs
    FROM {scope}
    WHERE has({span_names:Array(String)}, SpanName)
    ORDER BY SpanName, Timestamp, TraceId, SpanId
    LIMIT 50000 BY SpanName
) AS s
ARRAY JOIN mapKeys(s.Attrs) AS k, mapValues(s.Attrs) AS v
WHERE lengthUTF8(v) <= 64
