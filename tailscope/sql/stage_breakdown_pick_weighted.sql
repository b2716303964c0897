-- stage_breakdown_pick.sql for stage_breakdown_scope_weighted.sql's sample: each request's Weight kept.
CREATE OR REPLACE TEMP TABLE _ts_span_times AS
SELECT s.grp, s.Weight, r.SpanTimes
FROM requests AS r
JOIN _ts_scope AS s ON s.TraceId = r.TraceId
WHERE r.RunLabel = ?
