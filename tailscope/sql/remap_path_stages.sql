-- A stage-rule edit's re-map (rule_remap.py): every kept path node's Bucket under the rules now in
-- force, by the same steps as span_tree.sql's walk, over the nodes (a few thousand) instead of the
-- spans. Into temp._ts_path_stage (PathId, Bucket, SpanName).
-- Placeholder (fixed SQL): rule_case, the CASE giving a node's first matching rule's position over
-- SpanKind, name regexes and AttrHits (statements.path_rule_case). Then two parameters: the positions of
-- the rules naming span kind Server, the stage of each position.
CREATE TEMP TABLE _ts_path_stage AS
WITH RECURSIVE
nodes AS MATERIALIZED (
    SELECT PathId, Sig, PSig, IsRoot, SpanName, AttrStage, FixedRule, ServerParent,
           CASE WHEN FixedRule IS NULL AND AttrMask IS NOT NULL THEN {rule_case} END AS RuleNo
    FROM span_paths
),
walk(PathId, Sig, SpanName, Depth, Stage, RuleNo) AS (
    SELECT PathId, Sig, SpanName, 0, coalesce(AttrStage, 'ingress'),
           CASE WHEN AttrStage IS NOT NULL THEN -1 ELSE 0 END
    FROM nodes WHERE IsRoot
    UNION ALL
    SELECT c.PathId, c.Sig, c.SpanName, t.Depth + 1,
           CASE WHEN c.FixedRule IS NOT NULL THEN c.AttrStage
                WHEN c.ServerParent AND NOT list_contains(?::INTEGER[], coalesce(c.RuleNo, 0)) THEN 'ingress'
                WHEN c.RuleNo IS NOT NULL THEN list_extract(?::VARCHAR[], c.RuleNo)
                WHEN t.Depth = 0 OR t.RuleNo = 10002 THEN 'unattributed'
                ELSE t.Stage END,
           CASE WHEN c.FixedRule IS NOT NULL THEN c.FixedRule
                WHEN c.ServerParent AND NOT list_contains(?::INTEGER[], coalesce(c.RuleNo, 0)) THEN 10002
                WHEN c.RuleNo IS NOT NULL THEN c.RuleNo
                WHEN t.Depth = 0 OR t.RuleNo = 10002 THEN 10001
                ELSE 10000 END
    FROM walk AS t JOIN nodes AS c ON c.PSig = t.Sig AND NOT c.IsRoot
    WHERE t.Depth < 64
)
SELECT PathId, any_value(CASE WHEN Depth = 0 OR RuleNo = 10002 THEN 'unattributed' ELSE Stage END) AS Bucket,
       any_value(SpanName) AS SpanName
FROM walk
GROUP BY PathId
