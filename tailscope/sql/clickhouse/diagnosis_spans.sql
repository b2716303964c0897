-- Diagnosis: every span of one run as plain columns for numpy, as ../diagnosis_spans.sql (read its
-- notes): 63-bit keys (cityHash64 here, DuckDB's hash there: only equality within one read matters),
-- the instance that ran the span (service.instance.id, else host.name:process.pid, else the Kubernetes
-- pod (k8s.pod.name[:process.pid]), else either, else
-- Jaeger's hostname / ip / client-uuid or Zipkin's net.host.ip:port, from
-- the Map's keys where DuckDB tests JSON for NULL), with the run's phase spans ({phases}:
-- phase_spans.sql over the same scope), their rule's stage as the stage attribute.
-- {scope}: the run's selection (store.clickhouse.statements.run_scope). The rows come unordered
-- with OrderTraceId / OrderSpanId, and diagnosis/load.py puts them in (StartNs, TraceId, SpanId) order with Arrow
-- (1 M spans: 0.2 s there against 1 s more for an ORDER BY here): a fixed order, since the
-- diagnosis' confidences depend on the order of the spans it reads.
SELECT
    TraceId AS OrderTraceId,
    SpanId AS OrderSpanId,
    toInt64(bitShiftRight(cityHash64(TraceId), 1)) AS TraceKey,
    toInt64(bitShiftRight(cityHash64(TraceId, SpanId), 1)) AS SpanKey,
    if(ParentSpanId = '', toInt64(-1), toInt64(bitShiftRight(cityHash64(TraceId, ParentSpanId), 1))) AS ParentKey,
    SpanName,
    SpanKind,
    ServiceName,
    concat(ServiceName, '/', multiIf(
        mapContains(ResourceAttributes, 'service.instance.id'), ResourceAttributes['service.instance.id'],
        mapContains(ResourceAttributes, 'faas.instance'), ResourceAttributes['faas.instance'],
        mapContains(ResourceAttributes, 'aws.log.stream.names'), ResourceAttributes['aws.log.stream.names'],
        mapContains(ResourceAttributes, 'host.name') AND mapContains(ResourceAttributes, 'process.pid'),
            concat(ResourceAttributes['host.name'], ':', ResourceAttributes['process.pid']),
        mapContains(ResourceAttributes, 'k8s.pod.name') AND mapContains(ResourceAttributes, 'process.pid'),
            concat(ResourceAttributes['k8s.pod.name'], ':', ResourceAttributes['process.pid']),
        mapContains(ResourceAttributes, 'k8s.pod.name'), ResourceAttributes['k8s.pod.name'],
        mapContains(ResourceAttributes, 'process.pid'), ResourceAttributes['process.pid'],
        mapContains(ResourceAttributes, 'host.name'), ResourceAttributes['host.name'],
        mapContains(ResourceAttributes, 'hostname'), ResourceAttributes['hostname'],
        mapContains(ResourceAttributes, 'net.host.ip') AND mapContains(ResourceAttributes, 'net.host.port'),
            concat(ResourceAttributes['net.host.ip'], ':', ResourceAttributes['net.host.port']),
        mapContains(ResourceAttributes, 'net.host.ip'), ResourceAttributes['net.host.ip'],
        mapContains(ResourceAttributes, 'host.ip'), ResourceAttributes['host.ip'],
        mapContains(ResourceAttributes, 'ip'), ResourceAttributes['ip'],
        mapContains(ResourceAttributes, 'client-uuid'), ResourceAttributes['client-uuid'],
        '')) AS Instance,
    StartNs,
    Duration,
    StageAttr
FROM (
    SELECT TraceId, SpanId, ParentSpanId, toString(SpanName) AS SpanName, toString(SpanKind) AS SpanKind,
           toString(ServiceName) AS ServiceName, ResourceAttributes,
           toUnixTimestamp64Nano(Timestamp) AS StartNs, toInt64(Duration) AS Duration,
           SpanAttributes['tailscope.stage'] AS StageAttr
    FROM {scope} AS o
    UNION ALL
    SELECT TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, ResourceAttributes, StartNs,
           Duration, assumeNotNull(AttrStage) AS StageAttr
    FROM ({phases}) AS p
)
