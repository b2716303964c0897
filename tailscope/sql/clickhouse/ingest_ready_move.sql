-- A file's converted spans (ingest_ready_ddl.sql) into otel_traces, once the whole file decoded.
INSERT INTO otel_traces SELECT * FROM _ts_ready
