-- One hash partition of a run's traces, for a whole-run derive done part by part (so its memory
-- follows the part, not the run). Params: run, number of parts, this part (0-based).
CREATE TEMP TABLE _ts_scope AS
SELECT DISTINCT TraceId FROM otel_traces WHERE RunLabel = ? AND hash(TraceId) % ?::UBIGINT = ?::UBIGINT
