-- A re-mapped run's per-request sums (rule_remap.py): request_stage_sums.sql over the run's kept paths
-- under the new rules (the placeholder below, filled by statements.remap_sums_query; params: run,
-- run, then SPAN_TIMES_MAX_HASH).
CREATE TEMP TABLE _ts_remap AS {sums}
