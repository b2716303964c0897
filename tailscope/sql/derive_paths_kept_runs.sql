-- The runs whose kept path rows (request_paths) cover every request: their whole derives keep them.
SELECT RunLabel FROM derive_state WHERE PathsKept
