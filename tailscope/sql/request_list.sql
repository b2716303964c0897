-- Requests, slowest first: the slowest-traces list, or those inside a heatmap rectangle.
-- Params after the filter's: stage ('' for e2e) and the rectangle (start, end, low ns, high ns; NULL
-- for an open side), the Duration floor (ns: only requests at or above it; the slowest list passes
-- one the run's histogram proves its rows all reach, so DuckDB skips the blocks of rows whose
-- Duration max is below it; -2^63 for none), then the row limit.
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
v AS (
    SELECT *,
           CASE ? WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
                  WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
                  WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
                  WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
                  WHEN 'unattributed' THEN unattributed_ns ELSE Duration END AS value_ns
    FROM f
)
SELECT RunLabel AS run, TraceId AS trace_id, SpanId AS root_span_id, Timestamp AS timestamp,
       Duration / 1e6 AS duration_ms, ClientDuration / 1e6 AS client_duration_ms,
       ServiceName AS service, Route AS route, Instance AS instance, IsError AS is_error,
       DominantStage AS dominant_stage,
       list_max([ingress_ns, queue_ns, parsing_ns, feature_hydration_ns, preprocessing_ns, model_forward_ns,
                 postprocessing_ns, downstream_ns, serialization_ns, unattributed_ns]) / 1e6
           AS dominant_stage_ms,
       SpanCount AS spans
FROM v
WHERE Timestamp >= coalesce(?, Timestamp) AND Timestamp < coalesce(?, Timestamp + INTERVAL 1 SECOND)
  AND value_ns >= coalesce(?, value_ns) AND value_ns < coalesce(?, value_ns + 1)
  AND Duration >= ?
ORDER BY Duration DESC, TraceId
LIMIT ?
