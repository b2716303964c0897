-- A load's converted spans in a table a second chdb session can read (ingest_ready_ddl.sql's
-- temporary _ts_ready is its session's only): one file's spans in the exporter's columns, named
-- _tailscope_ready_<random hex> by tailscope.store.clickhouse.overlap, dropped after the load
-- (ingest_shared_ready_drop.sql). On disk, as _ts_ready (memory does not grow with the file); a
-- crash leaves a table of that name, which the next load drops (ingest_shared_ready_stale.sql).
CREATE TABLE IF NOT EXISTS {ready:Identifier} ENGINE = MergeTree ORDER BY tuple()
AS SELECT * FROM otel_traces WHERE 0
