-- Diagnosis: the span links of the run's CONSUMER spans, one row per link, as ../diagnosis_links.sql:
-- SpanKey the consumer span's key, LinkKey the linked span's, both hashed as in diagnosis_spans.sql.
-- Links are Nested columns here (parallel arrays). {scope}: the run's selection.
SELECT toInt64(bitShiftRight(cityHash64(TraceId, SpanId), 1)) AS SpanKey,
       toInt64(bitShiftRight(cityHash64(link_trace, link_span), 1)) AS LinkKey
FROM {scope} AS o
ARRAY JOIN `Links.TraceId` AS link_trace, `Links.SpanId` AS link_span
WHERE toString(SpanKind) = 'Consumer'
