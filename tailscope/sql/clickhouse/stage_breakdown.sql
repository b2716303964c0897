-- Stage breakdown's span tree output on ClickHouse (span_tree.sql's {output}), as
-- ../stage_breakdown.sql: attributed time per (stage, span name, trace) of the sampled traces; the
-- caller sums it per group. The root's and nested SERVER spans' own time is unattributed.
SELECT if(w.Depth = 0 OR w.RuleNo = 10002, 'unattributed', w.Stage) AS stage, s.SpanName AS span_name,
       s.TraceId AS TraceId, sum(w.AttributedNs) AS ns
FROM span_rows AS w
JOIN _ts_spans AS s ON s.TK = w.TK AND s.SK = w.SK AND s.PK = w.PK
GROUP BY stage, span_name, TraceId
