-- A load's converted file into otel_traces with each span once (the first copy stays), for a new
-- run whose file repeats spans (ingest_ready_repeats.sql): as the DuckDB loader and
-- ingest_fresh_fill.sql keep them. Param: ready.
INSERT INTO otel_traces
SELECT * FROM {ready:Identifier}
LIMIT 1 BY TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName
