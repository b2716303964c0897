-- span_tree.sql output for the derive (derive.py): three kinds of rows, told apart by Part.
--   'path'    one per (request TK, path signature Sig): Bucket, where the stage rules in force put
--             the path's time ('unattributed' for the root's and tier roots' own time, as
--             span_tree_requests.sql), Ns its attributed time (ns, not rounded), Spans its real spans
--   'node'    one per distinct Sig (duplicates possible where span ids repeat): what the path's stage
--             depends on under any stage rules (rule_remap.py re-maps nodes, not spans), kept in
--             span_paths
--   'request' one per request: the root's ids and start, the client-observed duration, RootNs
, path_rows AS (
    SELECT 'path' AS Part, TK, Sig,
           any_value(CASE WHEN Depth = 0 OR RuleNo = 10002 THEN 'unattributed' ELSE Stage END) AS Bucket,
           sum(AttributedNs) AS Ns,
           count(*) FILTER (WHERE RuleNo < 20000) AS Spans  -- phase spans are not spans
    FROM span_rows
    GROUP BY TK, Sig
),
node_rows AS (
    SELECT 'node' AS Part, n.Sig, n.PSig, n.Depth = 0 AS IsRoot, s.SpanName, s.SpanKind, s.AttrStage,
           CASE WHEN s.RuleNo = -1 OR s.RuleNo >= 20000 THEN s.RuleNo END AS FixedRule,
           s.AttrMask, tr.SK IS NOT NULL AS ServerParent
    FROM (SELECT Sig, any_value(PSig) AS PSig, min(Depth) AS Depth,
                 any_value({'tk': TK, 'sk': SK, 'pk': PK}) AS R
          FROM exclusive GROUP BY Sig) AS n
    JOIN spans AS s ON s.TK = n.R.tk AND s.SK = n.R.sk AND s.PK = n.R.pk
    LEFT JOIN tier_roots AS tr ON tr.TK = s.TK AND tr.SK = s.SK
)
SELECT * FROM path_rows
UNION ALL BY NAME
SELECT * FROM node_rows
UNION ALL BY NAME
SELECT 'request' AS Part, r.TK, s.TraceId, s.SpanId, r.ClientDuration, s.StartNs, s.EndNs - s.StartNs AS RootNs
FROM request_root AS r
JOIN spans AS s ON s.TK = r.TK AND s.SK = r.RootSK
