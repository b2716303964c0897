-- As stage_mapping_scope.sql, over the traces with a span starting in one window of time (a sampled
-- diagnosis: the mapping's read stays within the window, skipping other row groups by Timestamp).
-- Params: run, the window's first and end ns, how many traces.
CREATE TEMP TABLE _ts_scope AS
SELECT TraceId FROM otel_traces
WHERE RunLabel = ? AND Timestamp >= make_timestamp_ns(?::BIGINT) AND Timestamp < make_timestamp_ns(?::BIGINT)
GROUP BY TraceId ORDER BY hash(TraceId) LIMIT ?
