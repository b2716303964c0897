-- The held-back derived rows (derive_staged_ddl.sql) into tailscope_requests.
INSERT INTO tailscope_requests SELECT * FROM _ts_derived
