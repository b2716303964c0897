-- A run's derived rows held back (per session, in memory) until its spans are in otel_traces:
-- tailscope.store.clickhouse.overlap derives from the load's ready table while a second session writes it.
CREATE TEMPORARY TABLE IF NOT EXISTS _ts_derived ENGINE = Memory AS SELECT * FROM tailscope_requests WHERE 0
