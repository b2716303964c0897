-- span_tree.sql (ClickHouse) output: one row per request, as ../span_tree_requests.sql: the root's
-- ids, the client-observed duration, the spans in the subtree, attributed time per stage (ns,
-- rounded half up: floor(x + 0.5)) and the root's effective duration (RootNs).
SELECT s.TraceId AS TraceId, s.SpanId AS SpanId, r.ClientDuration AS ClientDuration, p.* EXCEPT (TK)
FROM (
    SELECT TK,
           countIf(RuleNo < 20000) AS SpanCount,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND RuleNo != 10002 AND Stage = 'ingress') + 0.5)) AS ingress_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'queue') + 0.5)) AS queue_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'parsing') + 0.5)) AS parsing_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'feature_hydration') + 0.5)) AS feature_hydration_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'preprocessing') + 0.5)) AS preprocessing_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'model_forward') + 0.5)) AS model_forward_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'postprocessing') + 0.5)) AS postprocessing_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'downstream') + 0.5)) AS downstream_ns,
           toInt64(floor(sumIf(AttributedNs, Depth > 0 AND Stage = 'serialization') + 0.5)) AS serialization_ns,
           anyIf(EffEnd - EffStart, Depth = 0) AS RootNs
    FROM span_rows
    GROUP BY TK
) AS p
JOIN _ts_request_root AS r ON r.TK = p.TK
JOIN _ts_spans AS s ON s.TK = r.TK AND s.SK = r.RootSK
