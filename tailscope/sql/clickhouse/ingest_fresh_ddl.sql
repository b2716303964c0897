-- The spans of a file that the run does not have yet (ingest_fresh_fill.sql), on their way from the
-- loader's _ts_ready into otel_traces (ingest_fresh_move.sql), dropped after (ingest_fresh_drop.sql).
-- Per session, in memory.
CREATE TEMPORARY TABLE IF NOT EXISTS _ts_fresh ENGINE = Memory AS SELECT * FROM otel_traces WHERE 0
