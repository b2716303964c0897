-- Whether a run has rows in request_histogram (a run with requests has some once built). Param: run.
SELECT count(*) > 0 FROM request_histogram WHERE RunLabel = ?
