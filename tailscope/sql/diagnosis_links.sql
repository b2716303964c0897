-- Diagnosis: the span links of the run's CONSUMER spans, one row per link (a batch consumer's span
-- links to the PRODUCER span of each message it read: diagnosis/units.py). SpanKey is the consumer
-- span's and LinkKey the linked span's key, hashed as SpanKey in diagnosis_spans.sql, so that numpy
-- finds the linked span among the spans read (a link to a span outside the run matches none).
-- Links are JSON text (schema.sql): json_each gives one row per link.
-- {windows}: the spans starting in the read's time windows only (a sampled diagnosis; all time otherwise).
WITH s AS (
    SELECT TraceId, SpanId, Links FROM otel_traces
    WHERE RunLabel = $run AND SpanKind = 'Consumer' AND Links <> '[]' AND {windows}
)
SELECT CAST(hash(s.TraceId, s.SpanId) >> 1 AS BIGINT) AS SpanKey,
       CAST(hash(l.value ->> 'TraceId', l.value ->> 'SpanId') >> 1 AS BIGINT) AS LinkKey
FROM s, json_each(s.Links) AS l
