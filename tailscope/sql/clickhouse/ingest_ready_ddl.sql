-- The loader's second staging table (per session, in memory): a file's spans already in the
-- exporter's columns, converted batch by batch (ingest_stage_move.sql into _ts_ready) while the
-- rest of the file decodes; ingest_ready_move.sql writes them into otel_traces at once.
CREATE TEMPORARY TABLE IF NOT EXISTS _ts_ready ENGINE = Memory AS SELECT * FROM otel_traces WHERE 0
