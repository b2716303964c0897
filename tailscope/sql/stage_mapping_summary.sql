-- The stage mapping in force: distinct (name, kind, stage, rule) of span_tree.sql's span output,
-- which the caller puts in place of the span_tree placeholder below.
SELECT SpanName, SpanKind, Stage, RuleNo, count(*) FROM ({span_tree}) GROUP BY ALL
