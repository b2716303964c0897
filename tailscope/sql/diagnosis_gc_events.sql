-- Diagnosis: runtime GC pauses reported as span events (e.g. `python.gc` with gc.duration_ns, or an
-- allocation stall such as JFR's `jdk.ZAllocationStall`), used
-- only to confirm a timing-based gc_pause finding. One pause is copied onto every span in flight, so
-- rows are deduplicated per instance and timestamp. The duration: the known keys first, else the first
-- attribute whose key names a pause, a duration or the time elapsed (`...pause`, `...duration`,
-- `...elapsed_s`), its unit from the key's
-- suffix (_ns, _us, _ms; seconds otherwise, as the OpenTelemetry conventions have it): DurKey.
SELECT DISTINCT
    ServiceName || '/' || coalesce(
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
    ) AS Instance,
    ev.Timestamp AS TimeNs,
    coalesce(
        TRY_CAST(ev.Attributes->>'gc.duration_ns' AS BIGINT),
        CAST(TRY_CAST(ev.Attributes->>'gc.duration_ms' AS DOUBLE) * 1e6 AS BIGINT),
        -- OpenTelemetry runtime conventions: durations in seconds
        CAST(TRY_CAST(ev.Attributes->>'v8js.gc.duration' AS DOUBLE) * 1e9 AS BIGINT),
        CAST(TRY_CAST(ev.Attributes->>'jvm.gc.duration' AS DOUBLE) * 1e9 AS BIGINT),
        CAST(TRY_CAST(ev.Attributes->>'gc.duration' AS DOUBLE) * 1e9 AS BIGINT),
        CAST(TRY_CAST(ev.Attributes->>DurKey AS DOUBLE) * CASE regexp_extract(lower(DurKey), '(ns|us|ms)$')
            WHEN 'ns' THEN 1 WHEN 'us' THEN 1e3 WHEN 'ms' THEN 1e6 ELSE 1e9 END AS BIGINT),
        0
    ) AS DurationNs
FROM (
    SELECT *, list_filter(json_keys(ev.Attributes), lambda k: regexp_matches(lower(k),
              '(^|[._])(pause|duration|elapsed)([._]?(ns|us|ms|s|sec|seconds))?$'))[1] AS DurKey
    FROM (
        -- Events is JSON text (schema.sql); only spans with an event that could be a GC pause are parsed
        SELECT ServiceName, ResourceAttributes,
               unnest(from_json(Events, '[{"Timestamp": "BIGINT", "Name": "VARCHAR", "Attributes": "JSON"}]')) AS ev
        FROM otel_traces
        WHERE RunLabel = $run AND {windows}
          AND Events <> '[]' AND regexp_matches(Events, 'gc|garbage|stall', 'i')
    )
)
-- a collection, or a thread's allocation stall (it waited for the collector to free memory: JFR's
-- jdk.ZAllocationStall and the like)
WHERE regexp_matches(lower(ev.Name), '(^|[._ ])gc([._ ]|$)|garbage|alloc(ation)?[._ ]?stall')
