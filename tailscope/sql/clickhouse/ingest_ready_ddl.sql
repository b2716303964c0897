-- The loader's second staging table (per session, on disk: MergeTree without a sort key, so memory
-- does not grow with the file): a file's spans already in the exporter's columns, converted batch
-- by batch (ingest_stage_move.sql into _ts_ready) while the rest of the file decodes;
-- ingest_ready_move.sql writes them into otel_traces at once. In memory (ENGINE = Memory) a 3 M-span
-- file peaked at 4.4 GB RSS, on disk 3.3 GB (the derive's window, not the file), equally fast.
CREATE TEMPORARY TABLE IF NOT EXISTS _ts_ready ENGINE = MergeTree ORDER BY tuple()
AS SELECT * FROM otel_traces WHERE 0
