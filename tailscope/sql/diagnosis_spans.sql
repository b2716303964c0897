-- Diagnosis: every span of one run as plain columns for numpy (tailscope.analysis.diagnosis.load).
-- The instance is the process that ran the span: service.instance.id, else host.name + process.pid,
-- else the service itself; GC pauses and lock contention are per process, so detectors group by it.
-- Ids stay strings here: pyarrow dictionary-encodes them in C++, faster than dense_rank() in SQL.
SELECT
    TraceId,
    SpanId,
    ParentSpanId,
    SpanName,
    SpanKind,
    ServiceName,
    ServiceName || '/' || coalesce(
        ResourceAttributes['service.instance.id'],
        ResourceAttributes['host.name'] || ':' || ResourceAttributes['process.pid'],
        ResourceAttributes['process.pid'],
        ResourceAttributes['host.name'],
        ''
    ) AS Instance,
    epoch_ns(Timestamp) AS StartNs,
    Duration,
    coalesce(SpanAttributes['tailscope.stage'], '') AS StageAttr
FROM otel_traces
WHERE RunLabel = $run
