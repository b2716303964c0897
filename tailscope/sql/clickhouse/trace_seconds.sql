-- The seconds each of some traces' spans start in, from the exporter's lookup table
-- (otel_traces_trace_id_ts, as trace_bounds.sql for one trace): a sampled view reads those seconds
-- of otel_traces only. Param: ids. Rows: start, end (unix seconds, the end's second included).
SELECT toInt64(toUnixTimestamp(min(Start))), toInt64(toUnixTimestamp(max(End)))
FROM otel_traces_trace_id_ts
WHERE TraceId IN {ids:Array(String)}
GROUP BY TraceId
