-- One part of a run's traces, for a whole-run derive done part by part (so its memory and its reads
-- follow the part, not the run): the traces whose first span starts in [$2, $3). A trace's spans
-- start at most $4 ns apart (the run's longest span plus clock skew, derive.refresh_run), so
-- reading the spans from $2 - $4 decides whether a trace's first span is before $2, and DuckDB skips
-- the row groups outside that window by their Timestamp min/max. Params: run, first start (ns),
-- end (ns, exclusive), reach (ns).
CREATE TEMP TABLE _ts_scope AS
SELECT TraceId FROM otel_traces
WHERE RunLabel = $1
  AND Timestamp >= make_timestamp_ns(($2 - $4)::BIGINT) AND Timestamp < make_timestamp_ns($3::BIGINT)
GROUP BY TraceId
HAVING min(Timestamp) >= make_timestamp_ns($2::BIGINT)
