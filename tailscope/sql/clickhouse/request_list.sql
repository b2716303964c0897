-- Requests, slowest first, as ../request_list.sql: the slowest-traces list, or those inside a
-- heatmap rectangle. Params: the filter's, p1 stage ('' for e2e), the rectangle p2 start, p3 end,
-- p4 low ns, p5 high ns (NULL for an open side), p6 the Duration floor (ns, -2^63 for none), p7 the
-- row limit.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
),
v AS (
    SELECT *, toInt64({include:stage_value}) AS value_ns
    FROM f
)
SELECT toString(RunLabel) AS run, TraceId AS trace_id, SpanId AS root_span_id, Timestamp AS timestamp,
       Duration / 1e6 AS duration_ms, ClientDuration / 1e6 AS client_duration_ms,
       toString(ServiceName) AS service, toString(Route) AS route, toString(Instance) AS instance,
       IsError AS is_error, toString(DominantStage) AS dominant_stage,
       arrayMax([ingress_ns, queue_ns, parsing_ns, feature_hydration_ns, preprocessing_ns, model_forward_ns,
                 postprocessing_ns, downstream_ns, serialization_ns, unattributed_ns]) / 1e6
           AS dominant_stage_ms,
       SpanCount AS spans
FROM v
WHERE ({p2:Nullable(DateTime64(9, 'UTC'))} IS NULL OR Timestamp >= {p2:Nullable(DateTime64(9, 'UTC'))})
  AND ({p3:Nullable(DateTime64(9, 'UTC'))} IS NULL OR Timestamp < {p3:Nullable(DateTime64(9, 'UTC'))})
  AND ({p4:Nullable(Int64)} IS NULL OR value_ns >= {p4:Nullable(Int64)})
  AND ({p5:Nullable(Int64)} IS NULL OR value_ns < {p5:Nullable(Int64)})
  AND Duration >= {p6:Int64}
ORDER BY Duration DESC, TraceId
LIMIT {p7:UInt64}
