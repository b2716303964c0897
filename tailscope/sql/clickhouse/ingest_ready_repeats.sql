-- How many spans of a load's converted file (a shared ready table, ingest_shared_ready_ddl.sql) may
-- repeat one before them in the same file: its rows less its distinct spans (a span is its ids,
-- start, duration, name and service, as ingest_fresh_fill.sql keys it), counted by a 64-bit hash of
-- that key (two spans can only look alike here, never hide a repeat: then ingest_ready_move_once.sql
-- decides exactly). Param: ready.
SELECT count() - uniqExact(cityHash64(TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName))
FROM {ready:Identifier}
