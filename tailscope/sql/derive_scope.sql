-- The traces an incremental refresh recomputes: those the writer touched (the Arrow table it
-- registered as _ts_touched, one TraceId column).
CREATE TEMP TABLE _ts_scope AS
SELECT DISTINCT TraceId FROM _ts_touched
