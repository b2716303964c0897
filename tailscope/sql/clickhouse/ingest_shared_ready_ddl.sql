-- A load's converted spans in a table a second chdb session can read (ingest_ready_ddl.sql's
-- temporary _ts_ready is its session's only): one file's spans in the exporter's columns, named
-- _tailscope_ready_<random hex> by tailscope.store.ch_overlap, dropped after the load
-- (ingest_shared_ready_drop.sql). In memory: a crash leaves at most an empty table of that name,
-- which the next load drops (ingest_shared_ready_stale.sql).
CREATE TABLE IF NOT EXISTS {ready:Identifier} ENGINE = Memory AS SELECT * FROM otel_traces WHERE 0
