-- refresh_run's per-path temp table.
DROP TABLE IF EXISTS temp._ts_tree_rows
