-- Forget the held-back derived rows (derive_staged_ddl.sql).
DROP TEMPORARY TABLE IF EXISTS _ts_derived
