-- Diagnosis: runtime GC pauses reported as span events, as ../diagnosis_gc_events.sql, from the
-- exporter's Nested Events columns. {scope}: the run's selection. Deduplicated per instance and time.
-- The duration: the known keys, else the first key naming a pause or a duration, its unit from its
-- suffix (_ns, _us, _ms; seconds otherwise): dur_key.
SELECT DISTINCT
    concat(toString(ServiceName), '/', multiIf(
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
    toUnixTimestamp64Nano(ev_time) AS TimeNs,
    coalesce(toInt64OrNull(ev_attributes['gc.duration_ns']),
             toInt64(round(toFloat64OrNull(ev_attributes['gc.duration_ms']) * 1e6)),
             -- OpenTelemetry runtime conventions: durations in seconds
             toInt64(round(toFloat64OrNull(ev_attributes['v8js.gc.duration']) * 1e9)),
             toInt64(round(toFloat64OrNull(ev_attributes['jvm.gc.duration']) * 1e9)),
             toInt64(round(toFloat64OrNull(ev_attributes['gc.duration']) * 1e9)),
             toInt64(round(toFloat64OrNull(ev_attributes[dur_key]) * multiIf(
                 match(lower(dur_key), 'ns$'), 1, match(lower(dur_key), 'us$'), 1e3,
                 match(lower(dur_key), 'ms$'), 1e6, 1e9))),
             0) AS DurationNs
FROM {scope}
ARRAY JOIN `Events.Timestamp` AS ev_time, `Events.Name` AS ev_name, `Events.Attributes` AS ev_attributes
ARRAY JOIN [arrayFirst(k -> match(lower(k), '(^|[._])(pause|duration|elapsed)([._]?(ns|us|ms|s|sec|seconds))?$'),
                       mapKeys(ev_attributes))] AS dur_key
-- a collection, or a thread's allocation stall (it waited for the collector: JFR's jdk.ZAllocationStall)
WHERE match(lower(toString(ev_name)), '(^|[._ ])gc([._ ]|$)|garbage|alloc(ation)?[._ ]?stall')
ORDER BY Instance, TimeNs
