-- ClickHouse span tree, step 4 of 5: the recursive walk down from each request root (see
-- span_tree.sql: tree). Parameter: stages (stage by rule position).
CREATE TEMPORARY TABLE _ts_walked ENGINE = Memory AS
WITH RECURSIVE
tree AS (
    SELECT s.TK AS TK, s.SK AS SK, s.PK AS PK, s.StartNs AS EffStart, s.EndNs AS EffEnd,
           s.StartNs AS PStart, toInt64(0) AS Depth,
           CAST(coalesce(s.AttrStage, 'ingress') AS String) AS Stage,
           CAST(if(s.AttrStage IS NOT NULL, -1, 0) AS Int64) AS RuleNo
    FROM _ts_spans AS s JOIN _ts_request_root AS r ON s.TK = r.TK AND s.SK = r.RootSK
    UNION ALL
    SELECT c.TK, c.SK, c.PK,
           least(greatest(c.StartNs, t.EffStart), t.EffEnd),
           greatest(least(greatest(c.StartNs, t.EffStart), t.EffEnd), least(c.EndNs, t.EffEnd)),
           t.EffStart,
           t.Depth + 1,
           CAST(multiIf(c.RuleNo = -1 OR c.RuleNo >= 20000, assumeNotNull(c.AttrStage),
                        tr.TK != 0, 'ingress',
                        c.RuleNo IS NOT NULL,
                        coalesce(arrayElement({stages:Array(Nullable(String))}, assumeNotNull(c.RuleNo)), ''),
                        t.Depth = 0 OR t.RuleNo = 10002, 'unattributed',
                        t.Stage) AS String),
           CAST(multiIf(c.RuleNo = -1 OR c.RuleNo >= 20000, assumeNotNull(c.RuleNo),
                        tr.TK != 0, 10002,
                        c.RuleNo IS NOT NULL, assumeNotNull(c.RuleNo),
                        t.Depth = 0 OR t.RuleNo = 10002, 10001,
                        10000) AS Int64)
    FROM tree AS t JOIN _ts_spans AS c ON c.TK = t.TK AND c.PK = t.SK
    LEFT JOIN _ts_tier_roots AS tr ON tr.TK = c.TK AND tr.SK = c.SK
    WHERE t.Depth < 64
)
SELECT * FROM tree
