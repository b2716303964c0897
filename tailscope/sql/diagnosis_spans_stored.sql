-- diagnosis_spans.sql's rows for the stored spans of one run: only the spans starting in the read's
-- time windows (a sampled diagnosis, diagnosis/sample.py: the row groups outside are skipped; all
-- time otherwise).
SELECT TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, ResourceAttributes,
       hash(ServiceName, ResourceAttributes) AS ResourceKey, epoch_ns(Timestamp) AS StartNs, Duration,
       coalesce(SpanAttributes->>'tailscope.stage', '') AS StageAttr
FROM otel_traces
WHERE RunLabel = $run AND {windows}
