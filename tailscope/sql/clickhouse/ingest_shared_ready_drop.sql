-- Drop a load's shared ready table (ingest_shared_ready_ddl.sql).
DROP TABLE IF EXISTS {ready:Identifier}
