-- span_tree.sql's output for ClickHouse's derive: one tailscope_requests row per request of the run,
-- as ../derive_requests.sql: the per-request stage times ({per_request}: span_tree_requests.sql)
-- joined with the root span's own row of the run's otel_traces for its attributes (the run's
-- conditions {scope_where}; PREWHERE reads the SpanId column first and the attribute maps only
-- for the roots' rows: at 1 M spans this statement took 0.9-1.5 s reading every row's maps,
-- 0.8-0.9 s so);
-- unattributed is the rest of the root's duration so the stage columns add up to it exactly.
-- Used as `INSERT INTO tailscope_requests <span_tree.sql ending in this>`. Parameters: run (label),
-- keep_start / keep_end: only requests whose root starts in [keep_start, keep_end) ns are kept (a
-- derive by time window reads the spans around the window, write.refresh_run).
SELECT
    {run:String} AS RunLabel,
    q.TraceId AS TraceId,
    q.SpanId AS SpanId,
    o.Timestamp AS Timestamp,
    toString(o.ServiceName) AS ServiceName,
    coalesce(nullIf(o.SpanAttributes['http.route'], ''), toString(o.SpanName)) AS Route,
    coalesce(nullIf(o.ResourceAttributes['service.instance.id'], ''),
             nullIf(o.ResourceAttributes['host.name'], ''), '') AS Instance,
    toInt64(o.Duration) AS Duration,
    o.StatusCode = 'Error'
        OR coalesce(toInt32OrNull(if(mapContains(o.SpanAttributes, 'http.response.status_code'),
                                     o.SpanAttributes['http.response.status_code'],
                                     o.SpanAttributes['http.status_code'])) >= 500, false) AS IsError,
    q.ClientDuration AS ClientDuration,
    toInt32(q.SpanCount) AS SpanCount,
    ['ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing', 'model_forward',
     'postprocessing', 'downstream', 'serialization', 'unattributed'][
        indexOf(q.stage_ns, arrayMax(q.stage_ns))] AS DominantStage,
    q.ingress_ns AS ingress_ns, q.queue_ns AS queue_ns, q.parsing_ns AS parsing_ns,
    q.feature_hydration_ns AS feature_hydration_ns, q.preprocessing_ns AS preprocessing_ns,
    q.model_forward_ns AS model_forward_ns, q.postprocessing_ns AS postprocessing_ns,
    q.downstream_ns AS downstream_ns, q.serialization_ns AS serialization_ns,
    q.unattributed_ns AS unattributed_ns,
    coalesce(toFloat64OrNull(o.SpanAttributes['tailscope.sample.weight']), 1) AS Weight
FROM (
    SELECT r.*,
           r.RootNs - (r.ingress_ns + r.queue_ns + r.parsing_ns + r.feature_hydration_ns
                       + r.preprocessing_ns + r.model_forward_ns + r.postprocessing_ns
                       + r.downstream_ns + r.serialization_ns) AS unattributed_ns,
           [r.ingress_ns, r.queue_ns, r.parsing_ns, r.feature_hydration_ns, r.preprocessing_ns,
            r.model_forward_ns, r.postprocessing_ns, r.downstream_ns, r.serialization_ns,
            unattributed_ns] AS stage_ns
    FROM ({per_request}) AS r
) AS q
JOIN (
    SELECT * FROM otel_traces
    PREWHERE SpanId IN (SELECT s.SpanId FROM _ts_request_root AS r
                        JOIN _ts_spans AS s ON s.TK = r.TK AND s.SK = r.RootSK)
    WHERE {scope_where}
) AS o ON o.TraceId = q.TraceId AND o.SpanId = q.SpanId
QUALIFY row_number() OVER (PARTITION BY q.TraceId ORDER BY o.Timestamp) = 1
    AND toUnixTimestamp64Nano(o.Timestamp) >= {keep_start:Int64}
    AND toUnixTimestamp64Nano(o.Timestamp) < {keep_end:Int64}
