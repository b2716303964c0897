-- Shared ready tables of loads that never finished (ingest_shared_ready_ddl.sql; a crash leaves an
-- empty one): any in the store's database when a load starts, since a chdb folder has one process
-- and that process one load at a time.
SELECT name FROM system.tables WHERE database = currentDatabase() AND startsWith(name, '_tailscope_ready_')
