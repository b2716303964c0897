-- A run's span durations held back with its derived rows (derive_staged_ddl.sql), per session, in
-- memory, until its spans are in otel_traces (tailscope.store.clickhouse.overlap).
CREATE TEMPORARY TABLE IF NOT EXISTS _ts_derived_durations ENGINE = Memory AS
SELECT * FROM tailscope_span_durations WHERE 0
