-- Stage breakdown from the sampled requests' SpanTimes (_ts_span_times, stage_breakdown_pick.sql):
-- attributed time per (stage, span name) summed over each group (band / median), each request's time
-- times its Weight (1 in an unweighted run), as stage_breakdown.sql / stage_breakdown_weighted.sql
-- sum the sampled traces' span rows (the same sums, added in another order).
SELECT stage, span_name, grp, sum(ns * Weight) AS ns
FROM (SELECT grp, Weight, unnest(SpanTimes, recursive := true) FROM _ts_span_times)
GROUP BY ALL
