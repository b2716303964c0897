-- Forget how far a run was read (param: run), so the next refresh rebuilds it.
DELETE FROM derive_state WHERE RunLabel = coalesce(?, RunLabel)
