-- tail_sample_stage.sql's table, before staging and once read.
DROP TABLE IF EXISTS temp._ts_tail_sample
