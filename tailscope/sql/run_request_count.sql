-- How many derived requests a run has (histogram: its pre-aggregates count them all). Param: the run.
SELECT count(*) FROM requests WHERE RunLabel = ?
