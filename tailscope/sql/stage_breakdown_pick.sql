-- The stage breakdown's sampled requests (_ts_scope, stage_breakdown_scope.sql) with their SpanTimes:
-- the attributed ns per (stage, span name) their derive kept (span_tree_requests.sql), read from
-- `requests` instead of building the span trees of their traces again (which reads the spans by a
-- scan of the run's TraceIds). SpanTimes is NULL for a request derived before the column existed:
-- the caller then reads the spans (stage_breakdown.sql). Param: run.
CREATE OR REPLACE TEMP TABLE _ts_span_times AS
SELECT s.grp, 1.0 AS Weight, r.SpanTimes
FROM requests AS r
JOIN _ts_scope AS s ON s.TraceId = r.TraceId
WHERE r.RunLabel = ?
