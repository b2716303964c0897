-- Whether the Gantt may rank a run's spans from span_histogram: the run's span count (runs) and how
-- many spans its rows count (equal when every write kept them). Param: the run.
SELECT (SELECT SpanCount FROM runs WHERE RunLabel = $run),
       (SELECT coalesce(sum(Spans), 0) FROM span_histogram WHERE RunLabel = $run)
