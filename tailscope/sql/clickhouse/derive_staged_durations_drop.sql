-- Forget the held-back span durations (derive_staged_durations_ddl.sql).
DROP TEMPORARY TABLE IF EXISTS _ts_derived_durations
