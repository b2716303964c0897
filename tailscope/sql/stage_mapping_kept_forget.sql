-- Forget a run's recorded stage mapping (param: run; NULL: every run's).
DELETE FROM stage_mapping_kept WHERE RunLabel = coalesce(?, RunLabel)
