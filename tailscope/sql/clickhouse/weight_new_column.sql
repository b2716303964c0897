-- Weight at the end of the migration's table, as tailscope_requests_ddl.sql has it.
ALTER TABLE _tailscope_requests_new ADD COLUMN Weight Float64 DEFAULT 1
