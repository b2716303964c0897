-- Drop the derived requests of the traces being recomputed. Params: run, then the window (ns) their
-- roots start in (derive.trace_window), which lets DuckDB skip row groups by Timestamp.
DELETE FROM requests
WHERE RunLabel = ?
  AND Timestamp BETWEEN make_timestamp_ns(?::BIGINT) AND make_timestamp_ns(?::BIGINT)
  AND TraceId IN (SELECT TraceId FROM _ts_scope)
