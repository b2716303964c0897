-- Where one trace's request lies in time, from its derived row: the root's start (ns) and the
-- longer of its server and client-observed durations (ns). The Gantt then reads the trace's spans
-- within that interval (plus clock skew, reader.trace_tree), which DuckDB finds by the row groups'
-- Timestamp min/max instead of scanning the run's TraceId column. No row: a trace without a derived
-- request (no root), read across the run. Params: run, trace.
SELECT epoch_ns(Timestamp), greatest(Duration, coalesce(ClientDuration, 0))
FROM requests
WHERE RunLabel = ? AND TraceId = ?
LIMIT 1
