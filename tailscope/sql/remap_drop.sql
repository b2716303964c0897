-- A rule edit's re-map temp tables, dropped (rule_remap.py).
DROP TABLE IF EXISTS temp._ts_remap
