-- The traces the stage mapping samples, once, as the temp table _ts_scope that span_tree.sql's
-- "traces" scope reads (the span walk reads its scope four times: names, spans, phase candidates and
-- their children; a sample computed in each would group the run's TraceIds four times).
-- Params: run, how many traces.
CREATE TEMP TABLE _ts_scope AS
SELECT TraceId FROM otel_traces WHERE RunLabel = ? GROUP BY TraceId ORDER BY hash(TraceId) LIMIT ?
