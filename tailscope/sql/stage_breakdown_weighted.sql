-- stage_breakdown.sql with each sampled request's time times its Weight (stage_breakdown_scope_weighted.sql).
-- Stage breakdown: attributed time per (stage, span name) summed over the sampled requests of each
-- group (band / median), from span_tree.sql's span output put in place of the placeholder. The root's
-- and nested SERVER spans' own time is unattributed, as in the requests table.
SELECT CASE WHEN t.Depth = 0 OR t.RuleNo = 10002 THEN 'unattributed' ELSE t.Stage END AS stage,
       t.SpanName AS span_name, s.grp, sum(t.AttributedNs * s.Weight) AS ns
FROM ({span_tree}) AS t
JOIN _ts_scope AS s ON s.TraceId = t.TraceId
GROUP BY ALL
