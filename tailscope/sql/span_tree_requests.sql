-- span_tree.sql output: one row per request: the root's ids, the client-observed duration, the
-- number of spans in the subtree, attributed time per stage (ns, rounded) and the root's effective
-- duration (RootNs). The self time of the root and of nested SERVER spans mapped like it (rule
-- 10002, always stage ingress) is in no stage column: derive_requests.sql, which turns these into `requests` rows, gives it
-- to unattributed.
SELECT s.TraceId, s.SpanId, r.ClientDuration, p.* EXCLUDE (TK)
FROM (
    SELECT TK,
           count(*) FILTER (WHERE RuleNo < 20000) AS SpanCount,  -- phase spans are not spans
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND RuleNo <> 10002 AND Stage = 'ingress'), 0)) AS BIGINT)
               AS ingress_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'queue'), 0)) AS BIGINT)
               AS queue_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'parsing'), 0)) AS BIGINT)
               AS parsing_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'feature_hydration'), 0)) AS BIGINT)
               AS feature_hydration_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'preprocessing'), 0)) AS BIGINT)
               AS preprocessing_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'model_forward'), 0)) AS BIGINT)
               AS model_forward_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'postprocessing'), 0)) AS BIGINT)
               AS postprocessing_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'downstream'), 0)) AS BIGINT)
               AS downstream_ns,
           CAST(round(coalesce(sum(AttributedNs) FILTER (WHERE Depth > 0 AND Stage = 'serialization'), 0)) AS BIGINT)
               AS serialization_ns,
           any_value(EffEnd - EffStart) FILTER (WHERE Depth = 0) AS RootNs
    FROM span_rows
    GROUP BY TK
) AS p
JOIN request_root AS r ON r.TK = p.TK
JOIN spans AS s ON s.TK = r.TK AND s.SK = r.RootSK
