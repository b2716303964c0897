-- One trace's time range, from the exporter's lookup table (otel_traces_trace_id_ts, filled by its
-- materialized view on every insert into otel_traces: the first and the last span start of the
-- trace, to the second), as the exporter reads one trace: the spans are then found between those
-- seconds (its primary key's toDateTime(Timestamp)) instead of across the run. Rows: start, end
-- (unix seconds; the end's second included), or none when the table has no such trace. Param: trace.
SELECT toInt64(toUnixTimestamp(min(Start))), toInt64(toUnixTimestamp(max(End)))
FROM otel_traces_trace_id_ts
WHERE TraceId = {trace:String}
HAVING count() > 0
