-- Diagnosis: every span of one run as plain columns for numpy (tailscope.analysis.diagnosis.load).
-- Ids travel as 63-bit hashes, not strings: TraceKey groups a trace's spans, SpanKey/ParentKey
-- (hashes of trace id + span id) let numpy find each span's parent with one sort and a binary
-- search, and match rows of later reads (span attributes). No sort (a join + ORDER BY here cost 3x
-- more on 1 M spans); the instance is read from the resource's JSON once per distinct resource and
-- joined back (parsing it on every span was 85 % of this read: 1 M spans 10 -> 3 s on a loaded
-- 2-core VM). The instance is the process that ran the span:
-- service.instance.id, else a serverless function's execution environment (OpenTelemetry's faas.instance, or
-- the awsxray receiver's aws.log.stream.names: one log stream per environment), else host.name + process.pid, else the
-- Kubernetes pod the collector's k8sattributes processor names (k8s.pod.name, with the pid where given), else what other tracers name the process by
-- (Jaeger's `hostname`, `ip` and `client-uuid` process tags, Zipkin's endpoint as net.host.ip and
-- port), else the service itself; GC pauses and lock contention are per process, so detectors group
-- by it. The spans CTE's rows are one of two fixed fragments: the stored spans
-- (diagnosis_spans_stored.sql) or the run's phase spans (a serving framework's self-reported
-- phases, phase_spans.sql, with their rule's stage as the stage attribute: diagnosis_spans_phases.sql),
-- read as two statements, the phase spans' beside the stored ones' on a second connection (the
-- DuckDB reader joins the two answers). TraceId and SpanId come along as OrderTraceId /
-- OrderSpanId: load.py puts the rows in (StartNs, TraceId, SpanId) order, the same on every engine
-- and whatever order the spans were written in (the detectors' sampling and null draws follow the
-- span order).
WITH spans AS (
    {spans}
),
resources AS (
    SELECT ResourceKey, ServiceName || '/' || coalesce(
        ResourceAttributes->>'service.instance.id',
        ResourceAttributes->>'faas.instance',
        ResourceAttributes->>'aws.log.stream.names',
        (ResourceAttributes->>'host.name') || ':' || (ResourceAttributes->>'process.pid'),
        (ResourceAttributes->>'k8s.pod.name') || ':' || (ResourceAttributes->>'process.pid'),
        ResourceAttributes->>'k8s.pod.name',
        ResourceAttributes->>'process.pid',
        ResourceAttributes->>'host.name',
        ResourceAttributes->>'hostname',
        (ResourceAttributes->>'net.host.ip') || ':' || (ResourceAttributes->>'net.host.port'),
        ResourceAttributes->>'net.host.ip',
        ResourceAttributes->>'host.ip',
        ResourceAttributes->>'ip',
        ResourceAttributes->>'client-uuid',
        ''
    ) AS Instance
    -- joined by ResourceKey, a 64-bit hash of (service, resource) each row carries (a join on the two
    -- strings compared them per span: a sampled 1 M-span run's read 0.16-0.20 -> 0.14-0.15 s CPU)
    FROM (
        SELECT ResourceKey, any_value(ServiceName) AS ServiceName,
               any_value(ResourceAttributes) AS ResourceAttributes
        FROM spans GROUP BY ResourceKey
    )
)
SELECT
    TraceId AS OrderTraceId,
    SpanId AS OrderSpanId,
    CAST(hash(TraceId) >> 1 AS BIGINT) AS TraceKey,
    CAST(hash(TraceId, SpanId) >> 1 AS BIGINT) AS SpanKey,
    CASE WHEN ParentSpanId = '' THEN -1 ELSE CAST(hash(TraceId, ParentSpanId) >> 1 AS BIGINT) END AS ParentKey,
    SpanName,
    SpanKind,
    s.ServiceName AS ServiceName,
    r.Instance AS Instance,
    StartNs,
    Duration,
    StageAttr
FROM spans AS s JOIN resources AS r ON s.ResourceKey = r.ResourceKey
