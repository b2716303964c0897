-- refresh_run's per-request temp table.
DROP TABLE IF EXISTS temp._ts_request_rows
