-- A rule edit's per-node stages, dropped (rule_remap.py).
DROP TABLE IF EXISTS temp._ts_path_stage
