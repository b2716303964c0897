-- The client root span kept for network analysis (outside the request subtree), as
-- ../client_span.sql. Params: trace, span.
SELECT SpanId, ParentSpanId, SpanName, toString(ServiceName), toString(SpanKind),
       toInt64(toUnixTimestamp64Nano(Timestamp)), toInt64(Duration), toString(StatusCode)
FROM otel_traces
WHERE TraceId = {trace:String} AND SpanId = {span:String}
LIMIT 1
