-- One `requests` row per request in the temp table _ts_request_rows (span_tree.sql with the
-- span_tree_requests.sql output, for the traces being refreshed). Root attributes come from the root span's own row in otel_traces (the
-- join reads only the run's rows within the traces' window: $1 = run label, $2/$3 = the window in
-- ns, derive.trace_window). Stage columns sum the spans' attributed time
-- (self time, with parallel branches' overlap split evenly), summed per stage in span_tree_requests.sql. `unattributed` is the rest of the root's
-- duration: the root's own self time, spans mapped to no stage, and float rounding (< 1 ns per span),
-- so the stage columns add up to Duration exactly.
INSERT INTO requests BY NAME
WITH per_request AS (
    SELECT * FROM _ts_request_rows
),
roots AS (
    SELECT p.* EXCLUDE (RootNs),
           p.RootNs - (p.ingress_ns + p.queue_ns + p.parsing_ns + p.feature_hydration_ns
                       + p.preprocessing_ns + p.model_forward_ns + p.postprocessing_ns + p.downstream_ns
                       + p.serialization_ns) AS unattributed_ns,
           o.Timestamp, o.ServiceName, o.SpanName, o.SpanAttributes, o.ResourceAttributes,
           o.Duration, o.StatusCode,
           [p.ingress_ns, p.queue_ns, p.parsing_ns, p.feature_hydration_ns, p.preprocessing_ns,
            p.model_forward_ns, p.postprocessing_ns, p.downstream_ns, p.serialization_ns,
            p.RootNs - (p.ingress_ns + p.queue_ns + p.parsing_ns + p.feature_hydration_ns
                        + p.preprocessing_ns + p.model_forward_ns + p.postprocessing_ns + p.downstream_ns
                        + p.serialization_ns)] AS stage_ns
    FROM per_request AS p
    JOIN otel_traces AS o ON o.RunLabel = $1 AND o.TraceId = p.TraceId AND o.SpanId = p.SpanId
        AND o.Timestamp BETWEEN make_timestamp_ns($2::BIGINT) AND make_timestamp_ns($3::BIGINT)
    QUALIFY row_number() OVER (PARTITION BY p.TraceId ORDER BY o.Timestamp) = 1
)
SELECT
    $1 AS RunLabel,
    TraceId,
    SpanId,
    Timestamp,
    ServiceName,
    coalesce(nullif(SpanAttributes->>'http.route', ''), SpanName) AS Route,
    coalesce(nullif(ResourceAttributes->>'service.instance.id', ''),
             nullif(ResourceAttributes->>'host.name', ''), '') AS Instance,
    Duration,
    StatusCode = 'Error'
        OR coalesce(try_cast(coalesce(SpanAttributes->>'http.response.status_code',
                                      SpanAttributes->>'http.status_code') AS INTEGER) >= 500, false) AS IsError,
    ClientDuration,
    SpanCount,
    list_extract(
        ['ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing', 'model_forward',
         'postprocessing', 'downstream', 'serialization', 'unattributed'],
        list_position(stage_ns, list_max(stage_ns))) AS DominantStage,
    ingress_ns, queue_ns, parsing_ns, feature_hydration_ns, preprocessing_ns,
    model_forward_ns, postprocessing_ns, downstream_ns, serialization_ns, unattributed_ns,
    -- how many requests it stands for (a head-sampled run's weight; 1 without one or when unreadable)
    coalesce(try_cast(SpanAttributes->>'tailscope.sample.weight' AS DOUBLE), 1) AS Weight,
    SpanTimes  -- attributed ns per (stage, span name): what the stage breakdown sums (schema.sql)
FROM roots
