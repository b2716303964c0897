-- A file's converted spans (_ts_ready) less those its run already has, each once: as the DuckDB
-- loader's ingest_dedupe_run.sql, a span is its ids, start, duration, name and service, and the first
-- copy stays (re-ingesting a file adds nothing; two different spans that share an id are both kept).
-- The run's stored spans are read only where the file's can be: its traces, within its time range.
-- Params: run (the tailscope.run resource attribute the loader set), first/last (ns, the file's
-- earliest and latest span start).
INSERT INTO _ts_fresh
SELECT * FROM _ts_ready
WHERE (TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName) NOT IN (
    SELECT TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName
    FROM otel_traces
    WHERE Timestamp BETWEEN fromUnixTimestamp64Nano({first:Int64}) AND fromUnixTimestamp64Nano({last:Int64})
      AND TraceId IN (SELECT TraceId FROM _ts_ready)
      AND ResourceAttributes['tailscope.run'] = {run:String}
)
LIMIT 1 BY TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName
