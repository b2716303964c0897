-- The client root span kept for network analysis (outside the request subtree), among the trace's
-- spans staged for its span tree (scope_spans_stage.sql; the ClickHouse engine has its own file).
-- Params: run, trace, span.
SELECT SpanId, ParentSpanId, SpanName, ServiceName, SpanKind, epoch_ns(Timestamp), Duration, StatusCode
FROM temp._ts_scope_spans
WHERE RunLabel = ? AND TraceId = ? AND SpanId = ?
LIMIT 1
