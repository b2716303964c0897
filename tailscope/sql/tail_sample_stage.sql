-- A large run's tail-vs-body sample (tail_sample_windows.sql's rows, registered from Arrow as
-- _ts_tail_sample_rows), staged for tail_attributes_windows.sql.
CREATE TEMP TABLE _ts_tail_sample AS SELECT * FROM _ts_tail_sample_rows
