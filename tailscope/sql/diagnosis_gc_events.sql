-- Diagnosis: runtime GC pauses reported as span events (e.g. `python.gc` with gc.duration_ns), used
-- only to confirm a timing-based gc_pause finding. One pause is copied onto every span in flight, so
-- rows are deduplicated per instance and timestamp.
SELECT DISTINCT
    ServiceName || '/' || coalesce(
        ResourceAttributes['service.instance.id'],
        ResourceAttributes['host.name'] || ':' || ResourceAttributes['process.pid'],
        ResourceAttributes['process.pid'],
        ResourceAttributes['host.name'],
        ''
    ) AS Instance,
    epoch_ns(ev.Timestamp) AS TimeNs,
    coalesce(
        TRY_CAST(ev.Attributes['gc.duration_ns'] AS BIGINT),
        CAST(TRY_CAST(ev.Attributes['gc.duration_ms'] AS DOUBLE) * 1e6 AS BIGINT),
        0
    ) AS DurationNs
FROM (
    SELECT ServiceName, ResourceAttributes, unnest(Events) AS ev
    FROM otel_traces
    WHERE RunLabel = $run AND len(Events) > 0
)
WHERE regexp_matches(lower(ev.Name), '(^|[._ ])gc([._ ]|$)|garbage')
