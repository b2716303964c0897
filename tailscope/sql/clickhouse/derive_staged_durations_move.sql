-- The held-back span durations (derive_staged_durations_ddl.sql) into tailscope_span_durations.
INSERT INTO tailscope_span_durations SELECT * FROM _ts_derived_durations
