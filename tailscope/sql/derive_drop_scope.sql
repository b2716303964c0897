-- refresh_run's temp table of traces to recompute.
DROP TABLE IF EXISTS temp._ts_scope
