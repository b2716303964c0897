-- diagnosis_spans.sql's rows for the run's phase spans: the temp table _ts_phase_spans the DuckDB
-- reader fills first (phase_spans.sql over the same run and windows), their rule's stage as the stage
-- attribute.
SELECT TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, ResourceAttributes,
       hash(ServiceName, ResourceAttributes) AS ResourceKey, StartNs, Duration, Stage AS StageAttr
FROM _ts_phase_spans
