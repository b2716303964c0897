-- Tail vs body's block sample table, dropped (tailscope.store.duckdb.tail_sample).
DROP TABLE IF EXISTS temp._ts_tail_sample
