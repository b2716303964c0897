-- A file's converted spans (ingest_ready_ddl.sql's _ts_ready, or a load's shared ready table:
-- ingest_shared_ready_ddl.sql) into otel_traces in one insert, once the whole file decoded.
INSERT INTO otel_traces SELECT * FROM {ready:Identifier}
