-- ClickHouse span tree, step 5 of 5: each walked span's exclusive (self) time: its effective
-- interval less the union of its children's (see span_tree.sql: covered, exclusive).
CREATE TEMPORARY TABLE _ts_exclusive ENGINE = Memory AS
WITH
child_runs AS (
    SELECT TK, PK, EffStart, EffEnd,
           max(EffEnd) OVER (
               PARTITION BY TK, PK ORDER BY EffStart, EffEnd
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevMax,
           row_number() OVER (PARTITION BY TK, PK ORDER BY EffStart, EffEnd) AS Nth
    FROM _ts_walked
    WHERE Depth > 0
),
covered AS (
    -- each child adds what of it lies past the running maximum end of the children before it
    SELECT TK, PK AS SK,
           sum(if(Nth = 1, EffEnd - EffStart, greatest(0, EffEnd - greatest(EffStart, PrevMax)))) AS U,
           max(EffEnd) AS LastEnd
    FROM child_runs
    GROUP BY TK, PK
)
    SELECT w.TK AS TK, w.SK AS SK, w.PK AS PK, w.EffStart AS EffStart, w.EffEnd AS EffEnd,
           w.PStart AS PStart, w.Depth AS Depth, w.Stage AS Stage, w.RuleNo AS RuleNo,
           (w.EffEnd - w.EffStart) - coalesce(c.U, 0) AS ExclusiveNs, c.LastEnd AS LastEnd
    FROM _ts_walked AS w LEFT JOIN covered AS c ON c.TK = w.TK AND c.SK = w.SK

