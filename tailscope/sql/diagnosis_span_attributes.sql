-- Diagnosis: the attributes of the spans of one name (to explain a slow mode, e.g. cache.hit=false,
-- or to read batch sizes). Long values are skipped: an explanation needs a few repeated values.
SELECT TraceId || ':' || SpanId AS SpanKey, kv.key AS AttrKey, kv.value AS AttrValue
FROM (
    SELECT TraceId, SpanId, unnest(map_entries(SpanAttributes)) AS kv
    FROM otel_traces
    WHERE RunLabel = $run AND SpanName = $span_name
)
WHERE length(kv.value) <= 64
