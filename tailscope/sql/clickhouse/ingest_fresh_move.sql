-- The file's spans new to the run (ingest_fresh_fill.sql) into otel_traces, in one insert.
INSERT INTO otel_traces SELECT * FROM _ts_fresh
