-- Drop a run's rows of one histogram table ({table}: request_histogram or stage_histogram; param:
-- the run, or NULL for every run).
DELETE FROM {table} WHERE RunLabel = coalesce(?, RunLabel)
