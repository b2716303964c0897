-- span_tree.sql output: one row per request: the root's ids, the client-observed duration, the
-- number of spans in the subtree, attributed time per stage (ns, rounded) and the root's effective
-- duration (RootNs). The self time of the root and of nested SERVER spans mapped like it (rule
-- 10002, always stage ingress) is in no stage column: derive_requests.sql, which turns these into `requests` rows, gives it
-- to unattributed.
-- SpanTimes: the request's attributed time (ns, not rounded) per (stage, span name), the root's and
-- rule-10002 spans' own time under 'unattributed', as stage_breakdown.sql sums a sampled request's
-- span rows; kept in `requests` so that the stage breakdown reads its sample's rows, not their spans
-- (a scan of the run's TraceIds: 2.2 s of CPU for a 50 M-span run). Only for requests whose
-- hash(TraceId) (TK) is at most the last parameter (statements.SPAN_TIMES_MAX_HASH: the lowest 1/16,
-- where a seeded sample of a large band lies), NULL for the others.
SELECT s.TraceId, s.SpanId, r.ClientDuration, p.* EXCLUDE (TK), n.SpanTimes
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
LEFT JOIN (
    SELECT TK, list({'stage': stage, 'span_name': span_name, 'ns': ns} ORDER BY stage, span_name) AS SpanTimes
    FROM (
        SELECT w.TK, CASE WHEN w.Depth = 0 OR w.RuleNo = 10002 THEN 'unattributed' ELSE w.Stage END AS stage,
               n.SpanName AS span_name, sum(w.AttributedNs) AS ns
        FROM span_rows AS w
        JOIN spans AS n ON n.TK = w.TK AND n.SK = w.SK AND n.PK = w.PK
        WHERE w.TK <= ?::UBIGINT
        GROUP BY ALL
    )
    GROUP BY TK
) AS n ON n.TK = p.TK
