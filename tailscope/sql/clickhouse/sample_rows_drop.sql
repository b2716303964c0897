-- sample_rows.sql's temporary table, dropped before it is made and after the span tree read it.
DROP TEMPORARY TABLE IF EXISTS _ts_sample_rows
