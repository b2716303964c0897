-- tail_kv.sql's temporary table, dropped before it is made and after tail_attributes.sql.
DROP TEMPORARY TABLE IF EXISTS _ts_tail_kv
