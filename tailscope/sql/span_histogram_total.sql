-- How many spans a run's span_histogram rows count. Param: the run.
SELECT coalesce(sum(Spans), 0) FROM span_histogram WHERE RunLabel = ?
