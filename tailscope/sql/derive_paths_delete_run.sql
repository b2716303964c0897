-- Drop a run's kept path rows (param: run, or NULL for every run).
DELETE FROM request_paths WHERE RunLabel = coalesce(?, RunLabel)
