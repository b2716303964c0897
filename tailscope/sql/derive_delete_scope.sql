-- Drop the derived requests of the traces being recomputed (param: run).
DELETE FROM requests WHERE RunLabel = ? AND TraceId IN (SELECT TraceId FROM _ts_scope)
