-- The traces an incremental refresh recomputes: those with spans above the high-water mark.
CREATE TEMP TABLE _ts_scope AS
SELECT DISTINCT TraceId FROM otel_traces WHERE RunLabel = ? AND rowid > ?
