-- Drop a run's derived requests (param: run, or NULL for every run).
DELETE FROM requests WHERE RunLabel = coalesce(?, RunLabel)
