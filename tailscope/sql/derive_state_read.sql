-- How many of a run's spans its derived rows reflect. Param: run.
SELECT SpanRows FROM derive_state WHERE RunLabel = ?
