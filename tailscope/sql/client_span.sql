-- The client root span kept for network analysis (outside the request subtree). Params: run, trace, span.
SELECT SpanId, ParentSpanId, SpanName, ServiceName, SpanKind, epoch_ns(Timestamp), Duration, StatusCode
FROM otel_traces
WHERE RunLabel = ? AND TraceId = ? AND SpanId = ?
LIMIT 1
