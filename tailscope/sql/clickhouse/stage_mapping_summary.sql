-- The stage mapping in force over a run (span_tree.sql's output for ClickHouse): distinct (name,
-- kind, stage, rule) of the walked spans and how many spans each.
SELECT s.SpanName AS SpanName, s.SpanKind AS SpanKind, w.Stage AS Stage, w.RuleNo AS RuleNo, count() AS spans
FROM span_rows AS w
JOIN _ts_spans AS s ON s.TK = w.TK AND s.SK = w.SK AND s.PK = w.PK
GROUP BY SpanName, SpanKind, Stage, RuleNo
