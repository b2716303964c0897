-- How many of the file's spans are new to the run (ingest_fresh_fill.sql).
SELECT count() FROM _ts_fresh
