-- Tail vs body's block sample, kept for tail_attributes_blocks.sql (tailscope.store.duckdb.tail_sample):
-- the sampled requests, registered as an Arrow table _ts_tail_sample_rows.
CREATE TEMP TABLE _ts_tail_sample AS SELECT * FROM _ts_tail_sample_rows
